package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// fillRequests writes n finished requests created from at on, with
// payloads the size a gateway writes for a short chat request (measured:
// its claim's events about 700 bytes, its terminal's about 800, its
// receipt about 1,800, its stored answer a few kilobytes).
func fillRequests(t *testing.T, s *Store, prefix string, n int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	pad := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	for i := range n {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		created := at.Add(time.Duration(i) * time.Millisecond)
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "sha",
			State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: created.Add(time.Minute), CreatedAt: created}
		evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: created, Data: pad(600)},
			{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvDispatch, At: created, Data: pad(100)}}
		if _, _, err := s.Claim(ctx, rec, evs); err != nil {
			t.Fatal(err)
		}
		end := created.Add(time.Second)
		f := &ledger.Finish{Identity: rec.Identity, RequestID: id, Generation: 1, State: ledger.Succeeded, At: end,
			Response: &ledger.Response{Status: 200, ContentType: "application/json", Body: pad(3000)},
			Events: []ledger.Event{{RequestID: id, Seq: 3, Generation: 1, Type: ledger.EvObserved, At: end, Data: pad(500)},
				{RequestID: id, Seq: 4, Generation: 1, Type: ledger.EvTerminal, At: end, Data: pad(300)}},
			Receipt: pad(1800), Tenant: "acme", Charge: 1}
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
}

// space is the database file's size once checkpointed, and the bytes of
// its pages in use (not on the free list).
type space struct{ bytes, used int64 }

func spaceOf(t *testing.T, path string) space {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var pages, free, size int64
	if err := r.r.QueryRow(`SELECT p.page_count, f.freelist_count, s.page_size FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s`).
		Scan(&pages, &free, &size); err != nil {
		t.Fatal(err)
	}
	return space{bytes: st.Size(), used: (pages - free) * size}
}

// The pages a sweep frees are reused by the requests written after it: a
// database that keeps a retention's worth of requests stops growing,
// where one that keeps every request grows with each.
func TestSweptSpaceIsReused(t *testing.T) {
	const n, rounds = 1000, 3
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	// round writes n requests on day d into the database at path, expires
	// their records (a day's idempotency retention), sweeps them too if
	// sweep, closes it (a clean close checkpoints the WAL into the file)
	// and measures it.
	round := func(path string, d int, sweep bool) space {
		s, err := OpenWith(path, Options{SyncNormal: true})
		if err != nil {
			t.Fatal(err)
		}
		day := t0.Add(time.Duration(d) * 24 * time.Hour)
		fillRequests(t, s, fmt.Sprintf("d%d", d), n, day)
		if _, err := s.Expire(ctx, day.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if sweep {
			if got, err := s.Sweep(ctx, day.Add(time.Hour)); err != nil || got != n {
				t.Fatalf("swept %d %v", got, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return spaceOf(t, path)
	}
	dir := t.TempDir()
	swept, kept := filepath.Join(dir, "swept.db"), filepath.Join(dir, "kept.db")
	var withSweep, without []space
	for d := range rounds {
		withSweep = append(withSweep, round(swept, d, true))
		without = append(without, round(kept, d, false))
	}
	perRequest := without[0].used / n
	t.Logf("kept history (receipt and events, records expired): %d bytes a request", perRequest)
	for d := range rounds {
		t.Logf("after %d×%d requests: %d bytes on file (%d in use) with the sweep, %d (%d) without",
			d+1, n, withSweep[d].bytes, withSweep[d].used, without[d].bytes, without[d].used)
	}
	last := rounds - 1
	if withSweep[last].bytes > withSweep[0].bytes+withSweep[0].bytes/20 {
		t.Fatalf("with the sweep the file grew from %d to %d bytes: the freed pages were not reused", withSweep[0].bytes, withSweep[last].bytes)
	}
	if grew := without[last].used - without[0].used; grew < int64(last)*n*perRequest*9/10 {
		t.Fatalf("without the sweep %d×%d requests use only %d bytes more than %d: the comparison measures nothing", rounds, n, grew, n)
	}
}
