package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Under writes that never pause, the WAL is still started over — a new
// salt in its header — every restartEvery or so, rather than growing by
// every commit for as long as the writes last.
func TestWALStartsOverUnderSteadyWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var stop atomic.Bool
	done := make(chan error, 1)
	var n atomic.Int64
	go func() {
		for i := 0; !stop.Load(); i++ {
			id := fmt.Sprintf("r%d", i)
			now := time.Now()
			rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
				State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
			if _, _, err := s.Claim(ctx, rec, []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now, Data: make([]byte, 900)}}); err != nil {
				done <- err
				return
			}
			if err := s.Finish(ctx, &ledger.Finish{Identity: rec.Identity, RequestID: id, Generation: 1, State: ledger.Succeeded, At: now,
				Response: &ledger.Response{Status: 200, ContentType: "application/json", Attempts: 1, Body: make([]byte, 500)},
				Events:   []ledger.Event{{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvTerminal, At: now}},
				Receipt:  make([]byte, 1700), Tenant: "acme"}); err != nil {
				done <- err
				return
			}
			n.Add(1)
		}
		done <- nil
	}()
	// The WAL header's salt (bytes 16 to 24) changes each time it starts over.
	salts := map[string]bool{}
	window := 6 * restartEvery
	for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(filepath.Join(dir, "ledger.db-wal"))
		if err != nil {
			t.Fatal(err)
		}
		hdr := make([]byte, 32)
		if _, err := f.ReadAt(hdr, 0); err == nil {
			salts[string(hdr[16:24])] = true
		}
		_ = f.Close()
	}
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d WAL headers seen over %v of %d requests", len(salts), window, n.Load())
	if n.Load() < 100 {
		t.Skipf("too few writes to tell (%d)", n.Load())
	}
	if len(salts) < 3 {
		t.Fatalf("the WAL started over %d times in %v of steady writes; want one about every %v", len(salts)-1, window, restartEvery)
	}
}

// A batch whose rows go in together still fails only the write that was
// wrong: the others commit, and that one gets its own error.
func TestABadWriteInABatchFailsAlone(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	ev := func(id string, seq int64) ledger.Event {
		return ledger.Event{RequestID: id, Seq: seq, Generation: 1, Type: ledger.EvObserved, At: now, Data: []byte("x")}
	}
	const n = 16
	for i := range n {
		id := fmt.Sprintf("b%d", i)
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
			State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		if _, _, err := s.Claim(ctx, rec, []ledger.Event{ev(id, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the writer off until every append is queued: they commit as
	// one batch. Request b7's repeats its claim's sequence number.
	s.conn.Lock()
	errs := make([]chan error, n)
	for i := range n {
		errs[i] = make(chan error, 1)
		seq := int64(2)
		if i == 7 {
			seq = 1
		}
		go func() { errs[i] <- s.Append(ctx, true, ev(fmt.Sprintf("b%d", i), seq)) }()
	}
	for s.queued.Load() < n {
		time.Sleep(time.Millisecond)
	}
	s.conn.Unlock()
	for i := range n {
		err := <-errs[i]
		evs, _ := s.Events(ctx, fmt.Sprintf("b%d", i))
		switch {
		case i == 7 && (err == nil || len(evs) != 1):
			t.Fatalf("the duplicate sequence number: %v, %d events", err, len(evs))
		case i != 7 && (err != nil || len(evs) != 2):
			t.Fatalf("b%d beside the bad write: %v, %d events", i, err, len(evs))
		}
	}
}
