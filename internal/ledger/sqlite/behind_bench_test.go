package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/ledger/ledgerbench"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// behindWriter writes a request's rows as a store written behind a log
// would (docs/performance.md, "The ledger's write path: options
// measured"): nobody waits for a commit — the log is what is durable — so
// the writer gathers as many writes as are queued into each commit, at
// sync normal. Claim creates unconditionally (the log decided).
type behindWriter struct {
	s     *Store
	claim func(tx wtx, rec *ledger.Record, evs []ledger.Event) error
	fin   func(tx wtx, f *ledger.Finish) error
}

func (w *behindWriter) Claim(ctx context.Context, rec *ledger.Record, evs []ledger.Event) (*ledger.Record, bool, error) {
	return nil, true, w.s.write(ctx, false, func(tx wtx) error { return w.claim(tx, rec, evs) })
}

func (w *behindWriter) Finish(ctx context.Context, f *ledger.Finish) error {
	return w.s.write(ctx, false, func(tx wtx) error { return w.fin(tx, f) })
}

// Drain waits for a commit after every write queued.
func (w *behindWriter) Drain() error {
	return w.s.write(context.Background(), true, func(wtx) error { return nil })
}

// todayBehind writes today's rows.
func todayBehind(s *Store) *behindWriter {
	return &behindWriter{s: s,
		claim: func(tx wtx, rec *ledger.Record, evs []ledger.Event) error {
			if _, err := insertRecord(tx, recordArgs(rec)); err != nil {
				return err
			}
			insertEvents(tx, eventArgs(evs))
			return nil
		},
		fin: func(tx wtx, f *ledger.Finish) error {
			resp, err := ledger.EncodeResponse(f.Response)
			if err != nil {
				return err
			}
			return finish(tx, f, resp, eventArgs(f.Events), factArgs(f.Tenant, f.RequestID, f.Receipt))
		}}
}

// leanBehind writes the lean layout's rows (lean_bench_test.go).
func leanBehind(l *leanStore) *behindWriter {
	return &behindWriter{s: l.s,
		claim: func(tx wtx, rec *ledger.Record, evs []ledger.Event) error {
			_, err := tx.exec(qLeanClaim, rec.Identity, rec.RequestID, rec.Tenant, rec.Operation, rec.RequestSHA256, 0, string(rec.State),
				rec.Owner, rec.Generation, ns(rec.LeaseUntil), ns(rec.CreatedAt), packEvents(evs))
			return err
		},
		fin: func(tx wtx, f *ledger.Finish) error {
			resp, err := ledger.EncodeResponse(f.Response)
			if err != nil {
				return err
			}
			if _, err := tx.exec(qLeanFinish, string(f.State), ns(f.At), f.Generation, f.Identity, f.RequestID, f.Generation); err != nil {
				return err
			}
			if _, err := tx.exec(qLeanDone, f.RequestID, f.Tenant, resp, packEvents(f.Events), f.Receipt); err != nil {
				return err
			}
			tx.charge(f.Tenant, f.Charge, f.At)
			return nil
		}}
}

// BenchmarkBehindRequestWrites is the cost of the queryable store alone
// when it is written behind a log, in today's layout and the lean one:
// what the log's own cost (internal/ledger/ledgerbench) is to be added to.
// The clock runs until the last write is committed.
func BenchmarkBehindRequestWrites(b *testing.B) {
	for _, layout := range []string{"today", "lean"} {
		for _, clients := range []int{64, 1} {
			b.Run(fmt.Sprintf("layout=%s/clients=%d", layout, clients), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "behind.db")
				var w *behindWriter
				if layout == "today" {
					st, err := OpenWith(path, Options{SyncNormal: true})
					if err != nil {
						b.Fatal(err)
					}
					defer st.Close()
					w = todayBehind(st)
				} else {
					st, err := openLean(path, Options{SyncNormal: true})
					if err != nil {
						b.Fatal(err)
					}
					defer st.Close()
					w = leanBehind(st)
				}
				ledgertest.BenchmarkRequestWrites(b, w, clients)
			})
		}
	}
}

// BenchmarkIntentLogBehindSQLite is the intent log
// (ledgerbench.LogStore) with this store written behind it, in today's
// layout and the lean one: the log is durable at the sync named, the
// store at sync normal, and the clock runs until the store has caught up.
func BenchmarkIntentLogBehindSQLite(b *testing.B) {
	for _, layout := range []string{"today", "lean"} {
		for _, sync := range []string{"full", "normal"} {
			for _, clients := range []int{64, 1} {
				b.Run(fmt.Sprintf("layout=%s/sync=%s/clients=%d", layout, sync, clients), func(b *testing.B) {
					dir := b.TempDir()
					var w *behindWriter
					if layout == "today" {
						st, err := OpenWith(filepath.Join(dir, "behind.db"), Options{SyncNormal: true})
						if err != nil {
							b.Fatal(err)
						}
						defer st.Close()
						w = todayBehind(st)
					} else {
						st, err := openLean(filepath.Join(dir, "behind.db"), Options{SyncNormal: true})
						if err != nil {
							b.Fatal(err)
						}
						defer st.Close()
						w = leanBehind(st)
					}
					l, _, err := intentlog.Open(filepath.Join(dir, "intent.log"), intentlog.Options{Sync: sync == "full"}, func([]byte) error { return nil })
					if err != nil {
						b.Fatal(err)
					}
					st := ledgerbench.NewLogStore(l, w)
					defer st.Close()
					ledgertest.BenchmarkRequestWrites(b, st, clients)
				})
			}
		}
	}
}
