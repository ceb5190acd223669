package ledgerbench

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// BenchmarkIntentLog is the request's writes in the intent log alone, at
// both syncs, from 64 clients and from one. The same log with SQLite
// written behind it is measured in internal/ledger/sqlite
// (BenchmarkIntentLogBehindSQLite).
func BenchmarkIntentLog(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, clients := range []int{64, 1} {
			b.Run(fmt.Sprintf("sync=%s/clients=%d", sync, clients), func(b *testing.B) {
				l, _, err := intentlog.Open(filepath.Join(b.TempDir(), "intent.log"), intentlog.Options{Sync: sync == "full"}, func([]byte) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				st := NewLogStore(l, nil)
				defer st.Close()
				ledgertest.BenchmarkRequestWrites(b, st, clients)
			})
		}
	}
}
