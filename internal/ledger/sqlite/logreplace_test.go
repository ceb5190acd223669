package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// A Replace goes through the intent log: it is checked against the index
// (or the database, when the index has no entry for the identity) and
// applied later. A delete of finished records running meanwhile — the
// retention's Expire — must not remove the record a Replace admitted
// before the Replace is applied: every replacing request keeps its record
// and the database refuses none of the log's records.
func TestLogReplaceBesideExpire(t *testing.T) {
	ctx := context.Background()
	s, err := OpenLog(filepath.Join(t.TempDir(), "l.db"), Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 400
	// Finished records, one a millisecond: the expiry below walks its
	// cutoff through them while they are replaced.
	for i := range n {
		id := fmt.Sprintf("old%d", i)
		if _, created, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil || !created {
			t.Fatalf("claim %s: %v %v", id, created, err)
		}
		f := logFinish(id, 1, 2)
		f.At = logT0.Add(time.Duration(i) * time.Millisecond)
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.barrier(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	replaced := make(chan string, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				old := fmt.Sprintf("old%d", i)
				r := logRec(fmt.Sprintf("new%d", i))
				r.Identity = "k:" + old
				ok, err := s.Replace(ctx, old, r, []ledger.Event{logEv(r.RequestID, 1, 1, ledger.EvCreated)})
				if err != nil {
					t.Errorf("replace %s: %v", old, err)
					return
				}
				if ok {
					replaced <- old
				}
			}
		})
	}
	expired := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
loop:
	for cut := 0; ; cut++ {
		k, err := s.Expire(ctx, logT0.Add(time.Duration(cut)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		expired += k
		select {
		case <-done:
			break loop
		default:
		}
	}
	close(replaced)
	if err := s.barrier(ctx); err != nil {
		t.Fatal(err)
	}
	count := 0
	for old := range replaced {
		count++
		rec, err := s.Get(ctx, "k:"+old)
		if err != nil {
			t.Fatalf("the request that replaced %s has no record: %v", old, err)
		}
		if want := "new" + old[3:]; rec.RequestID != want || rec.State != ledger.InProgress {
			t.Fatalf("identity of %s holds %s (%s), want %s in progress", old, rec.RequestID, rec.State, want)
		}
	}
	if count+expired != n {
		t.Errorf("%d replaced and %d expired of %d finished records", count, expired, n)
	}
	if r := s.Refused(); r != 0 {
		t.Errorf("the database refused %d of the log's records", r)
	}
	t.Logf("%d replaced, %d expired first", count, expired)
}

// A Replace's record is replayed from the log as it was applied: a
// database that never applied it (a crash right after the Replace
// returned) holds the new request in the identity's place once reopened,
// the old request's history kept.
func TestLogReplaceIsReplayedAfterACrash(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "ledger.db")
	s := openLogStore(t, src, true)
	if _, created, err := s.Claim(ctx, logRec("a"), []ledger.Event{logEv("a", 1, 1, ledger.EvCreated)}); err != nil || !created {
		t.Fatalf("claim: %v %v", created, err)
	}
	if err := s.Finish(ctx, logFinish("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	r := logRec("b")
	r.Identity = "k:a"
	if ok, err := s.Replace(ctx, "a", r, []ledger.Event{logEv("b", 1, 1, ledger.EvCreated)}); err != nil || !ok {
		t.Fatalf("replace: %v %v", ok, err)
	}
	if ok, err := s.Replace(ctx, "a", logRec("c"), nil); err != nil || ok {
		t.Fatalf("a second replace of the request replaced: %v %v", ok, err)
	}
	log, err := os.ReadFile(src + ".log.1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path+".log.1", log, 0o600); err != nil {
		t.Fatal(err)
	}
	re := openLogStore(t, path, true)
	rec, err := re.Get(ctx, "k:a")
	if err != nil || rec.RequestID != "b" || rec.State != ledger.InProgress {
		t.Fatalf("after the replay the identity holds %+v (%v), want b in progress", rec, err)
	}
	if evs, err := re.Events(ctx, "a"); err != nil || len(evs) != 2 {
		t.Fatalf("the replaced request's events: %d (%v), want 2", len(evs), err)
	}
	if _, err := re.Receipt(ctx, "acme", "a"); err != nil {
		t.Fatalf("the replaced request's receipt: %v", err)
	}
	if n := re.Refused(); n != 0 {
		t.Fatalf("the replay refused %d records", n)
	}
}

// A Replace after a Claim that read the identity's record trusts that
// read only while nothing has changed the record since: another arrival
// that replaced it, or a delete and a new claim in its place, make the
// first arrival's Replace fail, as the database would answer.
func TestLogReplaceAfterAClaimSeesWhatChangedSince(t *testing.T) {
	ctx := context.Background()
	s := openLogStore(t, filepath.Join(t.TempDir(), "ledger.db"), true)
	finished := func(id, identity string) {
		t.Helper()
		r := logRec(id)
		r.Identity = identity
		existing, created, err := s.Claim(ctx, r, []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)})
		if err != nil {
			t.Fatal(err)
		}
		if !created {
			if ok, err := s.Replace(ctx, existing.RequestID, r, []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil || !ok {
				t.Fatalf("replace %s by %s: %v %v", existing.RequestID, id, ok, err)
			}
		}
		f := logFinish(id, 1, 2)
		f.Identity = identity
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := s.barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	arrive := func(id, identity string) string {
		t.Helper()
		r := logRec(id)
		r.Identity = identity
		existing, created, err := s.Claim(ctx, r, nil)
		if err != nil || created {
			t.Fatalf("claim %s: %v %v", id, created, err)
		}
		return existing.RequestID
	}
	replace := func(prev, id, identity string) bool {
		t.Helper()
		r := logRec(id)
		r.Identity = identity
		ok, err := s.Replace(ctx, prev, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// Another arrival replaced the request the first one read.
	finished("p1", "k:x")
	seen := arrive("a1", "k:x")
	finished("b1", "k:x") // reads p1 too, replaces it, finishes
	if replace(seen, "a1", "k:x") {
		t.Fatalf("a1 replaced %s, which b1 had replaced", seen)
	}

	// The request read was deleted and another claimed its identity.
	finished("p2", "k:y")
	seen = arrive("a2", "k:y")
	if n, err := s.Expire(ctx, logT0.Add(time.Hour)); err != nil || n == 0 {
		t.Fatalf("expire: %d %v", n, err)
	}
	finished("b2", "k:y") // a new claim in the place
	if replace(seen, "a2", "k:y") {
		t.Fatalf("a2 replaced %s, deleted since", seen)
	}

	// The request read was deleted, nothing in its place.
	finished("p3", "k:z")
	seen = arrive("a3", "k:z")
	if n, err := s.Expire(ctx, logT0.Add(time.Hour)); err != nil || n == 0 {
		t.Fatalf("expire: %d %v", n, err)
	}
	if replace(seen, "a3", "k:z") {
		t.Fatalf("a3 replaced %s, deleted since", seen)
	}

	// Nothing changed: the Replace takes the claim's word and replaces.
	finished("p4", "k:w")
	seen = arrive("a4", "k:w")
	if !replace(seen, "a4", "k:w") {
		t.Fatalf("a4 did not replace %s", seen)
	}
	if err := s.barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "k:w"); err != nil || rec.RequestID != "a4" {
		t.Fatalf("k:w holds %+v (%v), want a4", rec, err)
	}
	if n := s.Refused(); n != 0 {
		t.Fatalf("the database refused %d records", n)
	}
}
