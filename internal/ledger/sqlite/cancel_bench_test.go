package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// cancellable calls a store with a context that can be cancelled, as a
// gateway request's can (ledgertest.BenchmarkRequestWrites passes one that
// cannot): the SQLite driver starts a goroutine for each query made with
// such a context, which the benchmark's count of goroutines then shows.
type cancellable struct {
	w   ledgertest.Writer
	ctx context.Context
}

func (c cancellable) Claim(_ context.Context, rec *ledger.Record, evs []ledger.Event) (*ledger.Record, bool, error) {
	return c.w.Claim(c.ctx, rec, evs)
}

func (c cancellable) Finish(_ context.Context, f *ledger.Finish) error { return c.w.Finish(c.ctx, f) }

func (c cancellable) Drain() error {
	if d, ok := c.w.(ledgertest.Drainer); ok {
		return d.Drain()
	}
	return nil
}

// BenchmarkRequestWritesCancellable is BenchmarkRequestWritesBySync's
// 64 clients at normal, on both stores, with a context that can be
// cancelled.
func BenchmarkRequestWritesCancellable(b *testing.B) {
	for _, store := range []string{"sqlite", "log"} {
		b.Run(fmt.Sprintf("store=%s", store), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			path := filepath.Join(b.TempDir(), "bench.db")
			var w ledgertest.Writer
			if store == "sqlite" {
				st, err := OpenWith(path, Options{SyncNormal: true})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				w = st
			} else {
				st, err := OpenLog(path, Options{SyncNormal: true})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				w = logDrainer{st}
			}
			withSched(b, func() { ledgertest.BenchmarkRequestWrites(b, cancellable{w, ctx}, 64) })
		})
	}
}
