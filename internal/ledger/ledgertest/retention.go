package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// staleReader is a store that shows the writes fenced off from a request
// (every backend has it; it is not part of ledger.Store).
type staleReader interface {
	StaleEvents(ctx context.Context, requestID string) ([]ledger.Event, error)
}

// history writes a request created at created: claimed with its creation
// event, one more event, then finished at created+1s with its receipt
// and charge (released if release), unless inProgress.
func history(t *testing.T, s ledger.Store, id string, created time.Time, release, inProgress bool) {
	t.Helper()
	ctx := context.Background()
	r := rec("k:"+id, id)
	r.CreatedAt, r.LeaseUntil = created, created.Add(30*time.Second)
	at := func(e ledger.Event, d time.Duration) ledger.Event { e.At = created.Add(d); return e }
	if _, created, err := s.Claim(ctx, r, []ledger.Event{at(ev(id, 1, 1, ledger.EvCreated), 0), at(ev(id, 2, 1, ledger.EvDispatch), time.Millisecond)}); err != nil || !created {
		t.Fatalf("claim %s: %v %v", id, created, err)
	}
	if inProgress {
		return
	}
	f := finish(id, 1, 3)
	f.At, f.Events[0] = created.Add(time.Second), at(f.Events[0], time.Second)
	f.Charge, f.Key, f.Release = 1000, "key-"+id, release
	if err := s.Finish(ctx, f); err != nil {
		t.Fatalf("finish %s: %v", id, err)
	}
}

// runRetention checks Sweep and ReceiptsBefore (docs/receipts.md,
// "Retention").
func runRetention(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("sweep deletes old histories without a record, nothing else, and no spend", func(t *testing.T) {
		s := open(t, false)
		cutoff := t0
		// expired: its record expires below; released: it never kept one;
		// kept: old, but its record is still within its retention;
		// running: old and still in progress; fresh: released, but newer
		// than the cutoff.
		history(t, s, "expired", t0.Add(-3*time.Hour), false, false)
		history(t, s, "released", t0.Add(-2*time.Hour), true, false)
		history(t, s, "kept", t0.Add(-90*time.Minute), false, false)
		history(t, s, "running", t0.Add(-4*time.Hour), false, true)
		history(t, s, "fresh", t0.Add(time.Minute), true, false)
		// A write from an owner fenced off is kept as evidence: it goes
		// with the rest of the history.
		if err := s.Append(ctx, true, ev("expired", 9, 7, ledger.EvDecision)); !errors.Is(err, ledger.ErrStaleGeneration) && !errors.Is(err, ledger.ErrFinished) {
			t.Fatalf("a fenced-off append: %v", err)
		}
		if sr, ok := s.(staleReader); ok {
			if evs, err := sr.StaleEvents(ctx, "expired"); err != nil || len(evs) != 1 {
				t.Fatalf("the fenced-off write kept: %v %v", evs, err)
			}
		}
		if n, err := s.Expire(ctx, t0.Add(-2*time.Hour)); err != nil || n != 1 {
			t.Fatalf("expire: %d %v", n, err)
		}
		days := []int64{ledger.Day(t0.Add(-3 * time.Hour)), ledger.Day(t0)}
		spendBefore := spendOf(t, s, days)
		listed, err := s.ReceiptsBefore(ctx, cutoff, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := datedIDs(listed); fmt.Sprint(got) != "[expired released kept]" {
			t.Fatalf("receipts before the cutoff, oldest first: %v", got)
		}
		if !listed[0].Created.Equal(t0.Add(-3*time.Hour)) || listed[0].Tenant != "acme" || string(listed[0].Body) != `{"request_id":"expired"}` {
			t.Fatalf("a dated receipt: %+v", listed[0])
		}

		n, err := s.Sweep(ctx, cutoff)
		if err != nil || n != 2 {
			t.Fatalf("swept %d %v, want the two old requests without a record", n, err)
		}
		for _, id := range []string{"expired", "released"} {
			gone(t, s, id)
		}
		for _, id := range []string{"kept", "fresh"} {
			if _, err := s.Receipt(ctx, "acme", id); err != nil {
				t.Fatalf("receipt of %s: %v", id, err)
			}
			if evs, err := s.Events(ctx, id); err != nil || len(evs) != 3 {
				t.Fatalf("events of %s: %d %v", id, len(evs), err)
			}
		}
		if evs, err := s.Events(ctx, "running"); err != nil || len(evs) != 2 {
			t.Fatalf("events of a request in progress: %d %v", len(evs), err)
		}
		if r, err := s.Get(ctx, "k:kept"); err != nil || r.State != ledger.Succeeded || r.Response == nil {
			t.Fatalf("the record a sweep must leave: %+v %v", r, err)
		}
		if list, err := s.Receipts(ctx, "acme", 10, ""); err != nil || len(list) != 2 {
			t.Fatalf("receipts listed after the sweep: %q %v", list, err)
		}
		if got := spendOf(t, s, days); !maps.Equal(got, spendBefore) {
			t.Fatalf("the spend changed: %v, was %v", got, spendBefore)
		}
		if n, err := s.Sweep(ctx, cutoff); err != nil || n != 0 {
			t.Fatalf("a second sweep: %d %v", n, err)
		}
		// Once its record expires, the kept request goes too; a restart
		// brings nothing back.
		if _, err := s.Expire(ctx, cutoff); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Sweep(ctx, cutoff); err != nil || n != 1 {
			t.Fatalf("swept %d %v, want the request whose record expired", n, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		for _, id := range []string{"expired", "released", "kept"} {
			gone(t, s, id)
		}
		if listed, err := s.ReceiptsBefore(ctx, t0.Add(time.Hour), nil, 10); err != nil || fmt.Sprint(datedIDs(listed)) != "[fresh]" {
			t.Fatalf("receipts after the sweeps: %v %v", datedIDs(listed), err)
		}
		if got := spendOf(t, s, days); !maps.Equal(got, spendBefore) {
			t.Fatalf("the spend changed: %v, was %v", got, spendBefore)
		}
	})
	t.Run("sweep works through many batches; receipts before a time page oldest first", func(t *testing.T) {
		s := open(t, false)
		// Requests created in threes at the same instant: the list
		// orders them by request id.
		n := 2*ledger.SweepBatch + 7
		created := func(i int) time.Time { return t0.Add(-time.Duration((n-i+2)/3) * time.Second) }
		for i := range n {
			history(t, s, fmt.Sprintf("b%04d", i), created(i), true, false)
		}
		var all []ledger.DatedReceipt
		var after *ledger.DatedReceipt
		for {
			page, err := s.ReceiptsBefore(ctx, t0, after, 50)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 50 {
				break
			}
			after = &page[len(page)-1]
		}
		if len(all) != n {
			t.Fatalf("%d receipts listed, want %d", len(all), n)
		}
		for i, d := range all {
			if want := fmt.Sprintf("b%04d", i); d.RequestID != want {
				t.Fatalf("receipt %d is %s, want %s", i, d.RequestID, want)
			}
		}
		// A cutoff splits them exactly: those created before it go.
		half, older := created(n/2), 0
		for i := range n {
			if created(i).Before(half) {
				older++
			}
		}
		if got, err := s.Sweep(ctx, half); err != nil || got != older {
			t.Fatalf("swept %d %v, want %d", got, err, older)
		}
		if got, err := s.Sweep(ctx, t0); err != nil || got != n-older {
			t.Fatalf("swept %d %v, want %d", got, err, n-older)
		}
		if list, err := s.Receipts(ctx, "acme", 10, ""); err != nil || len(list) != 0 {
			t.Fatalf("receipts left: %d %v", len(list), err)
		}
	})
	t.Run("sweep stops when its context ends", func(t *testing.T) {
		s := open(t, false)
		history(t, s, "old", t0.Add(-time.Hour), true, false)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Sweep(cctx, t0); !errors.Is(err, context.Canceled) {
			t.Fatalf("a sweep with its context ended: %v", err)
		}
		if _, err := s.Receipt(ctx, "acme", "old"); err != nil {
			t.Fatalf("a cancelled sweep deleted: %v", err)
		}
	})
}

// gone fails t unless request id has no receipt, events or fenced-off
// writes left.
func gone(t *testing.T, s ledger.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Receipt(ctx, "acme", id); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the receipt of %s after the sweep: %v", id, err)
	}
	if evs, err := s.Events(ctx, id); err != nil || len(evs) != 0 {
		t.Fatalf("the events of %s after the sweep: %v %v", id, evs, err)
	}
	if sr, ok := s.(staleReader); ok {
		if evs, err := sr.StaleEvents(ctx, id); err != nil || len(evs) != 0 {
			t.Fatalf("the fenced-off writes of %s after the sweep: %v %v", id, evs, err)
		}
	}
}

// spendOf is the tenants' and keys' spend on days.
func spendOf(t *testing.T, s ledger.Store, days []int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, d := range days {
		sp, err := s.Spend(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range sp {
			out[fmt.Sprintf("tenant %s day %d", k, d)] = v
		}
	}
	ks, err := s.KeySpend(context.Background(), days[0], days[len(days)-1])
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ks {
		out["key "+k] = v
	}
	return out
}

func datedIDs(ds []ledger.DatedReceipt) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.RequestID
	}
	return out
}
