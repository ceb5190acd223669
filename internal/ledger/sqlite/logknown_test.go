package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/ledger"
)

// checkKnown fails unless every identity the database holds is in the
// set of those it may hold (everything appended applied first).
func checkKnown(t interface {
	Helper()
	Fatalf(string, ...any)
}, s *LogStore) {
	t.Helper()
	ctx := context.Background()
	if err := s.barrier(ctx); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	rows, err := s.db.r.QueryContext(ctx, `SELECT identity FROM requests`)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("%v", err)
		}
		h := s.identityHash(id)
		sh := s.shardOf(h)
		sh.mu.Lock()
		ok := sh.mayHave(h)
		sh.mu.Unlock()
		if !ok {
			t.Fatalf("the database holds %s, the set of identities it may hold does not", id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%v", err)
	}
}

// TestLogKnownIdentitiesProperty: whatever runs — claims, finishes that
// keep or release their record, expiry, replacement, rebuilds of the set,
// reopening — the set of identities the database may hold has every one
// it holds, and a Claim returns the record the database holds, as a
// model of the ledger says.
func TestLogKnownIdentitiesProperty(t *testing.T) {
	ctx := context.Background()
	// One store for every case (each its own identities), reopened by
	// some of them: opening one per case would take most of the time.
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenLog(path, Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		prefix := fmt.Sprintf("c%d-", cases)
		type rec struct {
			id       string
			finished bool
		}
		model := map[string]*rec{} // by identity key: what the database (and log) hold
		n := 0
		key := rapid.Map(rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}), func(k string) string { return prefix + k })
		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				n++
				r := logRec(fmt.Sprintf("%sr%d", prefix, n))
				r.Identity = "k:" + k
				existing, created, err := s.Claim(ctx, r, []ledger.Event{logEv(r.RequestID, 1, 1, ledger.EvCreated)})
				if err != nil {
					rt.Fatalf("claim %s: %v", k, err)
				}
				if m := model[k]; m != nil {
					if created || existing == nil || existing.RequestID != m.id {
						rt.Fatalf("claim %s: created %v, %+v; the ledger holds %s", k, created, existing, m.id)
					}
					return
				}
				if !created {
					rt.Fatalf("claim %s: not created (%+v), the ledger holds none", k, existing)
				}
				model[k] = &rec{id: r.RequestID}
			},
			"finish": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				m := model[k]
				if m == nil || m.finished {
					rt.Skip("nothing in progress")
				}
				f := logFinish(m.id, 1, 2)
				f.Identity = "k:" + k
				f.Release = rapid.Bool().Draw(rt, "release")
				if err := s.Finish(ctx, f); err != nil {
					rt.Fatalf("finish %s: %v", k, err)
				}
				if f.Release {
					delete(model, k)
				} else {
					m.finished = true
				}
			},
			"expire": func(rt *rapid.T) {
				if _, err := s.Expire(ctx, logT0.Add(time.Hour)); err != nil {
					rt.Fatalf("expire: %v", err)
				}
				for k, m := range model {
					if m.finished {
						delete(model, k)
					}
				}
			},
			"replace": func(rt *rapid.T) {
				k := key.Draw(rt, "key")
				m := model[k]
				if m == nil {
					rt.Skip("nothing to replace")
				}
				n++
				r := logRec(fmt.Sprintf("%sr%d", prefix, n))
				r.Identity = "k:" + k
				ok, err := s.Replace(ctx, m.id, r, []ledger.Event{logEv(r.RequestID, 1, 1, ledger.EvCreated)})
				if err != nil || !ok {
					rt.Fatalf("replace %s: %v %v", k, ok, err)
				}
				model[k] = &rec{id: r.RequestID}
			},
			"rebuild": func(rt *rapid.T) {
				if err := s.rebuildKnown(ctx); err != nil {
					rt.Fatalf("rebuild: %v", err)
				}
			},
			"reopen": func(rt *rapid.T) {
				if rapid.IntRange(0, 9).Draw(rt, "reopen") != 0 {
					rt.Skip("reopening is slow: one time in ten") // (each starts a log file of 16 MiB)
				}
				if err := s.Close(); err != nil {
					rt.Fatalf("close: %v", err)
				}
				var err error
				if s, err = OpenLog(path, Options{SyncNormal: true}); err != nil {
					rt.Fatalf("reopen: %v", err)
				}
				// The reopen ended the leases: the model's requests in
				// progress are still in progress.
			},
			"": func(rt *rapid.T) {
				checkKnown(rt, s)
				if n := s.Refused(); n != 0 {
					rt.Fatalf("the database refused %d records", n)
				}
			},
		})
	})
}

// TestLogKnownRebuildRacesClaims: the set is rebuilt again and again while
// requests are claimed, finished (some releasing their record) and
// expired; after it all, the set has every identity the database holds,
// and a Claim of each returns its record.
func TestLogKnownRebuildRacesClaims(t *testing.T) {
	ctx := context.Background()
	s := openLogStore(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	stop := make(chan struct{})
	var rebuilds sync.WaitGroup
	rebuilds.Add(1)
	go func() {
		defer rebuilds.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.rebuildKnown(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, created, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil || !created {
					t.Errorf("claim %s: %v %v", id, created, err)
					return
				}
				f := logFinish(id, 1, 2)
				f.Release = i%3 == 0
				if err := s.Finish(ctx, f); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 9 && w == 0 {
					if _, err := s.Expire(ctx, logT0); err != nil { // finished at logT0+1s: none
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rebuilds.Wait()
	checkKnown(t, s)
	for w := range 4 {
		for i := range 50 {
			id := fmt.Sprintf("w%d-%d", w, i)
			r := logRec("again-" + id)
			r.Identity = "k:" + id
			existing, created, err := s.Claim(ctx, r, nil)
			switch {
			case err != nil:
				t.Fatal(err)
			case i%3 == 0 && !created:
				t.Fatalf("%s was released, its identity claimed again got %+v", id, existing)
			case i%3 != 0 && (created || existing.RequestID != id):
				t.Fatalf("%s is in the ledger, a Claim of its identity got created=%v %+v", id, created, existing)
			}
		}
	}
	if _, err := s.Get(ctx, "k:none"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatal(err)
	}
}
