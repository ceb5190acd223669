package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// openLogStore opens a LogStore for t at a sync, closed (and checked to
// have had no record refused) when t ends.
func openLogStore(t *testing.T, path string, normal bool) *LogStore {
	t.Helper()
	s, err := OpenLog(path, Options{SyncNormal: normal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := s.Refused(); n != 0 {
			t.Errorf("the database refused %d records the index admitted", n)
		}
		_ = s.Close()
	})
	return s
}

func TestLogStoreConformance(t *testing.T) {
	for _, normal := range []bool{false, true} {
		t.Run(fmt.Sprintf("SyncNormal=%v", normal), func(t *testing.T) {
			var path string
			ledgertest.Run(t, func(t *testing.T, reopen bool) ledger.Store {
				if !reopen {
					path = filepath.Join(t.TempDir(), "ledger.db")
				}
				return openLogStore(t, path, normal)
			})
		})
	}
}

var logT0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func logRec(id string) *ledger.Record {
	return &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "sha-" + id,
		State: ledger.InProgress, Owner: "o1", Generation: 1, LeaseUntil: logT0.Add(time.Minute), CreatedAt: logT0}
}

func logEv(id string, seq, gen int64, typ ledger.EventType) ledger.Event {
	return ledger.Event{RequestID: id, Seq: seq, Generation: gen, Type: typ, At: logT0.Add(time.Duration(seq) * time.Millisecond),
		Data: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}
}

func logFinish(id string, gen, seq int64) *ledger.Finish {
	return &ledger.Finish{Identity: "k:" + id, RequestID: id, Generation: gen, State: ledger.Succeeded, At: logT0.Add(time.Second),
		Response: &ledger.Response{Status: 200, ContentType: "application/json", Body: []byte(`{"id":"` + id + `"}`), Attempts: 1},
		Events:   []ledger.Event{logEv(id, seq, gen, ledger.EvTerminal)}, Receipt: []byte(`{"request_id":"` + id + `"}`), Tenant: "acme", Charge: 10}
}

// frameEnds reads a log file's bytes and returns where each frame ends.
func frameEnds(t *testing.T, b []byte) []int {
	t.Helper()
	off := len("oncelog\x01")
	ends := []int{off}
	for {
		_, n, err := intentlog.ReadFrame(b[off:])
		if err != nil {
			return ends
		}
		off += n
		ends = append(ends, off)
	}
}

// TestLogReplayAtEveryRecordBoundaryAndTornTail: a log cut by a crash at
// any record boundary, or inside a record, opens with exactly the records
// before the cut applied, once each — also when the database had applied
// part of them before the crash.
func TestLogReplayAtEveryRecordBoundaryAndTornTail(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "ledger.db")
	s := openLogStore(t, src, true)
	const reqs = 4 // each: a claim, an append, a finish — three records
	for j := range reqs {
		id := fmt.Sprintf("r%d", j)
		if _, created, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil || !created {
			t.Fatalf("claim %s: %v %v", id, created, err)
		}
		if err := s.Append(ctx, true, logEv(id, 2, 1, ledger.EvDispatch)); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, logFinish(id, 1, 3)); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.ReadFile(src + ".log.1")
	if err != nil {
		t.Fatal(err)
	}
	ends := frameEnds(t, log)
	if len(ends) != 3*reqs+1 {
		t.Fatalf("%d frames in the log, want %d", len(ends)-1, 3*reqs)
	}
	check := func(t *testing.T, s *LogStore, records int) {
		t.Helper()
		for j := range reqs {
			id := fmt.Sprintf("r%d", j)
			have := min(max(records-3*j, 0), 3) // this request's records before the cut
			r, err := s.Get(ctx, "k:"+id)
			switch {
			case have == 0:
				if !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("%s: claim past the cut found: %+v %v", id, r, err)
				}
				continue
			case err != nil:
				t.Fatalf("%s: %v", id, err)
			case (r.State == ledger.Succeeded) != (have == 3):
				t.Fatalf("%s after %d records: state %s", id, have, r.State)
			case have == 3 && string(r.Response.Body) != `{"id":"`+id+`"}`:
				t.Fatalf("%s: stored response %q", id, r.Response.Body)
			}
			if evs, err := s.Events(ctx, id); err != nil || len(evs) != have {
				t.Fatalf("%s: %d events (%v), want %d", id, len(evs), err, have)
			}
			if _, err := s.Receipt(ctx, "acme", id); (err == nil) != (have == 3) {
				t.Fatalf("%s: receipt %v", id, err)
			}
		}
		spend, err := s.Spend(ctx, ledger.Day(logT0))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10 * (records / 3)); spend["acme"] != want {
			t.Fatalf("spend %d after %d records, want %d (each finish charged once)", spend["acme"], records, want)
		}
	}
	// reopen writes log (the first cut bytes) beside a database that has
	// applied the first applied records, and opens it.
	reopen := func(t *testing.T, cut []byte, applied int) *LogStore {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if applied > 0 {
			if err := os.WriteFile(path+".log.1", log[:ends[applied]], 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenLog(path, Options{SyncNormal: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(path+".log.1", cut, 0o600); err != nil {
			t.Fatal(err)
		}
		return openLogStore(t, path, true)
	}
	for i := range ends {
		cuts := map[string][]byte{"at the boundary": log[:ends[i]]}
		if i+1 < len(ends) {
			next := ends[i+1]
			cuts["torn in the header"] = log[:ends[i]+5]
			cuts["torn in the record"] = log[:next-3]
			flipped := slices.Clone(log[:next])
			flipped[next-2] ^= 0x40
			cuts["corrupt last record"] = flipped
		}
		for name, cut := range cuts {
			for _, applied := range []int{0, i / 2} {
				t.Run(fmt.Sprintf("after %d records, %s, %d applied", i, name, applied), func(t *testing.T) {
					check(t, reopen(t, cut, applied), i)
				})
			}
		}
	}
}

// TestLogFenceRaceNeverLosesAnAcknowledgedFinish: a takeover and a finish
// of the generation it fences off, at once: one of them wins, the other is
// refused, and what was acknowledged is what a reopen finds.
func TestLogFenceRaceNeverLosesAnAcknowledgedFinish(t *testing.T) {
	ctx := context.Background()
	for _, normal := range []bool{false, true} {
		t.Run(fmt.Sprintf("SyncNormal=%v", normal), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			s, err := OpenLog(path, Options{SyncNormal: normal})
			if err != nil {
				t.Fatal(err)
			}
			const n = 40
			finished := map[string]bool{}
			for i := range n {
				id := fmt.Sprintf("f%d", i)
				if _, _, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				var ferr, terr error
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); <-start; ferr = s.Finish(ctx, logFinish(id, 1, 2)) }()
				go func() { defer wg.Done(); <-start; _, terr = s.Takeover(ctx, id, "o2", 1, logT0.Add(time.Hour)) }()
				close(start)
				wg.Wait()
				switch {
				case ferr == nil && errors.Is(terr, ledger.ErrFinished):
					finished[id] = true
				case terr == nil && errors.Is(ferr, ledger.ErrStaleGeneration):
				default:
					t.Fatalf("%s: finish %v, takeover %v: exactly one must win", id, ferr, terr)
				}
			}
			if n := s.Refused(); n != 0 {
				t.Fatalf("the database refused %d admitted records", n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openLogStore(t, path, normal)
			for i := range n {
				id := fmt.Sprintf("f%d", i)
				r, err := s.Get(ctx, "k:"+id)
				if err != nil {
					t.Fatal(err)
				}
				if finished[id] != (r.State == ledger.Succeeded) || !finished[id] && r.Generation != 2 {
					t.Fatalf("%s: finish acknowledged %v, reopened record %s at generation %d", id, finished[id], r.State, r.Generation)
				}
			}
		})
	}
}

// TestLogClaimRaceCreatesOnce: many claims of one identity at once, while
// the database behind may or may not have applied the first: exactly one
// creates it, every other gets that one's record, and so does a reopen.
func TestLogClaimRaceCreatesOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenLog(path, Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		identity := fmt.Sprintf("k:same%d", round)
		start := make(chan struct{})
		var mu sync.Mutex
		var winners []string
		seen := map[string]bool{}
		var wg sync.WaitGroup
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("c%d-%d", round, c)
				r := logRec(id)
				r.Identity = identity
				<-start
				got, created, err := s.Claim(ctx, r, []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case created:
					winners = append(winners, id)
				default:
					seen[got.RequestID] = true
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || len(seen) > 1 || len(seen) == 1 && !seen[winners[0]] {
			t.Fatalf("round %d: created by %v; the others saw %v", round, winners, seen)
		}
		if round == 10 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = OpenLog(path, Options{SyncNormal: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer s.Close()
	for round := range 20 {
		if r, err := s.Get(ctx, fmt.Sprintf("k:same%d", round)); err != nil || r.State != ledger.InProgress {
			t.Fatalf("round %d: %+v %v", round, r, err)
		}
	}
}

// TestLogSegmentsAreDeletedOnceApplied: the log moves to a new segment as
// it grows, and a segment goes once the database has applied all of it;
// a clean Close leaves none, and a reopen has every request.
func TestLogSegmentsAreDeletedOnceApplied(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenLog(path, Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	s.segLimit = 4096
	const n = 40
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		if _, _, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, logFinish(id, 1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, "k:s0"); err != nil { // a barrier: everything applied
		t.Fatal(err)
	}
	files, nums, err := segments(path)
	if err != nil || len(files) != 1 || nums[0] < 3 {
		t.Fatalf("segments after everything was applied: %v %v %v; want only the current one, after a few", files, nums, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _, _ := segments(path); len(files) != 0 {
		t.Fatalf("a clean close left %v", files)
	}
	s = openLogStore(t, path, true)
	for i := range n {
		if r, err := s.Get(ctx, fmt.Sprintf("k:s%d", i)); err != nil || r.State != ledger.Succeeded {
			t.Fatalf("s%d after a reopen: %+v %v", i, r, err)
		}
	}
}

// TestLogReadOnlySeesWhatTheDatabaseApplied: a reader (OpenReadOnly) reads
// the database, not the log. It sees every write a running LogStore has
// acknowledged once the database has applied it (a LogStore call after it
// waits for that), and all of them after a clean Close; records a crash
// left in the log only, it sees once a writer has opened the file again
// and applied them.
func TestLogReadOnlySeesWhatTheDatabaseApplied(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	s, err := OpenLog(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, logRec("a"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, logFinish("a", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Receipt(ctx, "acme", "a"); err != nil { // applied
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if r, err := ro.Get(ctx, "k:a"); err != nil || r.State != ledger.Succeeded {
		t.Fatalf("the reader sees %+v %v", r, err)
	}
	// A crash that leaves a finish in the log only: the log of another
	// store's claim and finish of b, beside this database.
	other := filepath.Join(t.TempDir(), "ledger.db")
	o := openLogStore(t, other, true)
	if _, _, err := o.Claim(ctx, logRec("b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := o.Finish(ctx, logFinish("b", 1, 1)); err != nil {
		t.Fatal(err)
	}
	tail, err := os.ReadFile(other + ".log.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The tail's LSNs (1, 2) are past what the database applied only if
	// they are renumbered: the database applied a's two records.
	var recs [][]byte
	off := len("oncelog\x01")
	for {
		rec, n, err := intentlog.ReadFrame(tail[off:])
		if err != nil {
			break
		}
		b := slices.Clone(rec)
		setLSN(b, int64(2+len(recs)+1))
		recs = append(recs, b)
		off += n
	}
	l, _, err := intentlog.Open(path+".log.9", intentlog.Options{}, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(recs...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Get(ctx, "k:b"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the reader sees b before a writer applied it: %v", err)
	}
	if err := ro.CatchUp(ctx); !errors.Is(err, ErrBehind) {
		t.Fatalf("catching up with no writer: %v, want ErrBehind", err)
	}
	w := openLogStore(t, path, false)
	if err := ro.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := ro.Get(ctx, "k:b"); err != nil || r.State != ledger.Succeeded {
		t.Fatalf("after the writer's open the reader sees %+v %v", r, err)
	}
	// While the writer runs, a reader that catches up sees every write
	// acknowledged before.
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		if _, _, err := w.Claim(ctx, logRec(id), nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(ctx, logFinish(id, 1, 1)); err != nil {
			t.Fatal(err)
		}
		if err := ro.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := ro.Receipt(ctx, "acme", id); err != nil {
			t.Fatalf("%s: the reader caught up without the receipt: %v", id, err)
		}
	}
}

// A database opened directly (OpenWith: the migrate command, a tool)
// beside an intent log a LogStore left when it stopped applies the log
// first: what the log acknowledged is there, and the log is gone.
func TestOpenWithAppliesALeftIntentLog(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "ledger.db")
	s := openLogStore(t, src, true)
	if _, created, err := s.Claim(ctx, logRec("r1"), []ledger.Event{logEv("r1", 1, 1, ledger.EvCreated)}); err != nil || !created {
		t.Fatalf("claim: %v %v", created, err)
	}
	if err := s.Finish(ctx, logFinish("r1", 1, 2)); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(src + ".log.1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path+".log.1", log, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenWith(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r, err := st.Get(ctx, "k:r1"); err != nil || r.State != ledger.Succeeded {
		t.Fatalf("the log's finished request, opened directly: %+v %v", r, err)
	}
	if files, _, _ := segments(path); len(files) != 0 {
		t.Fatalf("the log is still there: %v", files)
	}
}
