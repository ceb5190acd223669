package recovery

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// leave writes a request a dead owner left: with a dispatched, unobserved
// attempt when inFlight, else with nothing sent.
func leave(t *testing.T, st ledger.Store, id string, inFlight bool, at time.Time) {
	t.Helper()
	hdr, _ := json.Marshal(receipt.Receipt{RequestID: id, Tenant: "acme", Operation: "chat.completions", Model: "chat",
		CreatedAt: at, Deadline: at.Add(time.Minute), Request: receipt.Facts{EstimatedInputTokens: 100}})
	evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: at, Data: hdr}}
	if inFlight {
		d, _ := json.Marshal(ledger.Dispatch{Ordinal: 1, Route: "primary", Purpose: "initial", NotBefore: at, ReserveUSD: 0.002})
		evs = append(evs, ledger.Event{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvReserved, At: at, Data: d},
			ledger.Event{RequestID: id, Seq: 3, Generation: 1, Type: ledger.EvDispatch, At: at, Data: d})
	}
	rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Owner: "dead", Generation: 1, LeaseUntil: at, CreatedAt: at}
	if _, _, err := st.Claim(context.Background(), rec, evs); err != nil {
		t.Fatal(err)
	}
}

// Recovery alone, on a store a dead owner left: a request with an attempt
// in flight becomes indeterminate (its generation bumped, its key kept,
// what a joiner elsewhere was shown in its receipt), one with nothing in
// flight releases its key; both receipts are stored, and the tenant
// limits are told once that charges were made. A second run finds
// nothing.
func TestRecoverySettlesWhatADeadOwnerLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	st := memory.New(0)
	leave(t, st, "req-in-flight", true, t0)
	leave(t, st, "req-nothing-sent", false, t0)
	charged := 0
	rv := &Recovery{Store: st, Clock: clock.NewFake(t0.Add(time.Minute)), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Policy: func() *policy.Policy { return &policy.Policy{} },
		Seen: func(_ context.Context, ids []string) (map[string]coord.Seen, error) {
			return map[string]coord.Seen{"req-in-flight": {Joined: 1, Emitted: 7}}, nil
		},
		Charged: func(context.Context) error { charged++; return nil }}
	n, err := rv.SettleLapsed(ctx)
	if err != nil || n != 2 {
		t.Fatalf("settled %d (%v), want 2", n, err)
	}
	if charged != 1 {
		t.Errorf("the limits were told %d times, want once", charged)
	}
	rec, err := st.Get(ctx, "k:req-in-flight")
	if err != nil || rec.State != ledger.Indeterminate || rec.Generation != 2 {
		t.Fatalf("the request in flight: %+v %v", rec, err)
	}
	var r receipt.Receipt
	if b, err := st.Receipt(ctx, "acme", "req-in-flight"); err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("no receipt: %v", err)
	}
	if r.Terminal != "indeterminate" || len(r.Attempts) != 1 || r.Dedup.Joined != 1 || r.Attempts[0].EmittedTokens != 7 || !r.Attempts[0].VisibleOutput {
		t.Errorf("receipt: terminal %s, %d attempts, joined %d, %+v", r.Terminal, len(r.Attempts), r.Dedup.Joined, r.Attempts)
	}
	if _, err := st.Get(ctx, "k:req-nothing-sent"); err == nil {
		t.Error("a request with nothing in flight kept its key")
	}
	if r, err := rv.Receipt(ctx, "acme", "req-nothing-sent"); err != nil || r.Terminal != "cancelled" {
		t.Errorf("the released request's receipt: %+v %v", r, err)
	}
	if _, err := rv.Receipt(ctx, "globex", "req-nothing-sent"); err == nil {
		t.Error("another tenant read a recovered receipt")
	}
	if n, err := rv.SettleLapsed(ctx); n != 0 || err != nil {
		t.Errorf("a second run settled %d (%v)", n, err)
	}
}
