package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// BenchmarkRequestWrites: the ledger's write path from 64 concurrent
// requests (ledgertest.BenchmarkRequestWrites).
func BenchmarkRequestWrites(b *testing.B) { benchmarkRequestWrites(b, 64) }

// BenchmarkRequestWritesSequential is the same from one client at a time:
// the ledger's latency, two commits per request.
func BenchmarkRequestWritesSequential(b *testing.B) { benchmarkRequestWrites(b, 1) }

func benchmarkRequestWrites(b *testing.B, clients int) {
	st, err := Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ledgertest.BenchmarkRequestWrites(b, st, clients)
}
