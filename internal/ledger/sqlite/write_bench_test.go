package sqlite

import (
	"context"
	"fmt"
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

// BenchmarkRequestWritesBySync is BenchmarkRequestWrites at both syncs,
// from 64 clients and from one: the store as it is, beside the layouts
// and logs measured against it (docs/performance.md).
func BenchmarkRequestWritesBySync(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, clients := range []int{64, 1} {
			b.Run(fmt.Sprintf("sync=%s/clients=%d", sync, clients), func(b *testing.B) {
				st, err := OpenWith(filepath.Join(b.TempDir(), "bench.db"), Options{SyncNormal: sync == "normal"})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				withSched(b, func() { ledgertest.BenchmarkRequestWrites(b, st, clients) })
			})
		}
	}
}

// BenchmarkLogRequestWritesBySync is BenchmarkRequestWritesBySync on the
// LogStore: the intent log in front, the database written behind; the
// clock runs until the database has applied every request.
func BenchmarkLogRequestWritesBySync(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, clients := range []int{64, 1} {
			b.Run(fmt.Sprintf("sync=%s/clients=%d", sync, clients), func(b *testing.B) {
				st, err := OpenLog(filepath.Join(b.TempDir(), "bench.db"), Options{SyncNormal: sync == "normal"})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				withSched(b, func() { ledgertest.BenchmarkRequestWrites(b, logDrainer{st}, clients) })
			})
		}
	}
}

// logDrainer tells BenchmarkRequestWrites when the database behind the
// log has caught up.
type logDrainer struct{ *LogStore }

func (d logDrainer) Drain() error { return d.barrier(context.Background()) }
