package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/recovery"
)

// seedUnfinished writes n requests a dead process left behind: half with a
// dispatched, unobserved attempt, half with nothing in flight.
func seedUnfinished(tb testing.TB, st ledger.Store, n int) {
	tb.Helper()
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	workers := 64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id := fmt.Sprintf("01dead00-0000-7000-8000-%012d", i)
				hdr, _ := json.Marshal(receipt.Receipt{RequestID: id, Tenant: "acme", Operation: "chat.completions", Model: "chat",
					CreatedAt: t0, Deadline: t0.Add(time.Minute), Request: receipt.Facts{EstimatedInputTokens: 100, MaxDataBoundary: "external"}})
				evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: t0, Data: hdr}}
				if i%2 == 0 {
					d, _ := json.Marshal(ledger.Dispatch{Ordinal: 1, Route: "primary", Purpose: "initial", NotBefore: t0, ReserveUSD: 0.002})
					evs = append(evs, ledger.Event{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvReserved, At: t0, Data: d},
						ledger.Event{RequestID: id, Seq: 3, Generation: 1, Type: ledger.EvDispatch, At: t0, Data: d})
				}
				rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
					State: ledger.InProgress, Owner: "dead-process", Generation: 1, LeaseUntil: t0, CreatedAt: t0}
				if _, _, err := st.Claim(context.Background(), rec, evs); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func recoveryPolicy(tb testing.TB) (*policy.Policy, *config.Secrets) {
	yaml := strings.NewReplacer("PRIMARY", "http://127.0.0.1:9", "FALLBACK", "http://127.0.0.1:9", "ANTHROPIC", "http://127.0.0.1:9").Replace(testConfig)
	cfg, err := config.Parse("recovery.yaml", []byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	pol, err := policy.Compile(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return pol, &config.Secrets{TenantKeys: map[string]string{keyAcme: "acme"}}
}

func TestRecoverySettlesEveryUnfinishedRequest(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seedUnfinished(t, st, 2000)
	pol, secrets := recoveryPolicy(t)
	g, err := New(pol, secrets, Options{Ledger: st})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	left, err := st.Unfinished(context.Background())
	if err != nil || len(left) != 0 {
		t.Fatalf("%d requests still unfinished (%v)", len(left), err)
	}
	// Every receipt is stored, and every charge made, with the settlement.
	if b, err := st.Receipt(context.Background(), "acme", "01dead00-0000-7000-8000-000000001999"); err != nil || len(b) == 0 {
		t.Fatalf("the last recovered request has no receipt: %v", err)
	}
	spend, err := st.Spend(context.Background(), ledger.Day(time.Now()))
	if err != nil || spend["acme"] == 0 {
		t.Fatalf("recovery charged nothing today: %v %v", spend, err)
	}
	// A dispatched attempt became indeterminate, charged its worst case,
	// and its receipt verifies; a request with nothing in flight released
	// its key.
	r, err := g.receipt(context.Background(), "acme", "01dead00-0000-7000-8000-000000000000")
	if err != nil || r.Terminal != "indeterminate" || len(r.Attempts) != 1 || r.Attempts[0].CostUSD == 0 {
		t.Fatalf("receipt %+v %v", r, err)
	}
	if _, err := g.receipt(context.Background(), "globex", "01dead00-0000-7000-8000-000000000000"); err == nil {
		t.Fatal("another tenant read a recovered receipt")
	}
	if released, err := g.receipt(context.Background(), "acme", "01dead00-0000-7000-8000-000000000001"); err != nil || released.Terminal != "cancelled" {
		t.Fatalf("released request's receipt %+v %v", released, err)
	}
	if rec, err := st.Get(context.Background(), "k:01dead00-0000-7000-8000-000000000000"); err != nil || rec.State != ledger.Indeterminate || rec.Generation != 2 {
		t.Fatalf("record %+v %v", rec, err)
	}
	if _, err := st.Get(context.Background(), "k:01dead00-0000-7000-8000-000000000001"); err == nil {
		t.Fatal("a request with nothing in flight kept its key")
	}
}

// BenchmarkRecovery100k measures start-up recovery of 100,000 unfinished
// requests (target: under 2 s).
func BenchmarkRecovery100k(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		st, err := sqlite.Open(filepath.Join(b.TempDir(), "ledger.db"))
		if err != nil {
			b.Fatal(err)
		}
		seedUnfinished(b, st, 100_000)
		pol, secrets := recoveryPolicy(b)
		b.StartTimer()
		g, err := New(pol, secrets, Options{Ledger: st})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		g.Close()
		_ = st.Close()
		b.StartTimer()
	}
}

// A request the engine had already stopped before any attempt (refused
// by a budget; its start decision is durable with its claim) and whose
// owner died before its terminal ends as that stop, not as a
// cancellation: its receipt verifies. (The chaos soak with three replicas
// found one receipt of 75,000 recovered as cancelled.)
func TestRecoveryKeepsAStopTakenBeforeAnyAttempt(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	id := "01dead00-0000-7000-8000-00000000c057"
	hdr, _ := json.Marshal(receipt.Receipt{RequestID: id, Tenant: "acme", Operation: "chat.completions", Model: "chat",
		CreatedAt: t0, Deadline: t0.Add(time.Minute), Request: receipt.Facts{EstimatedInputTokens: 100, MaxDataBoundary: "external"},
		Decisions: []receipt.Decision{{AfterAttempt: 0, Action: "stop", Terminal: "exhausted", Reason: "cost_budget"}}})
	rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Owner: "dead-process", Generation: 1, LeaseUntil: t0, CreatedAt: t0}
	if _, _, err := st.Claim(context.Background(), rec, []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: t0, Data: hdr}}); err != nil {
		t.Fatal(err)
	}
	pol, secrets := recoveryPolicy(t)
	g, err := New(pol, secrets, Options{Ledger: st})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	r, err := g.receipt(context.Background(), "acme", id)
	if err != nil || r.Terminal != "exhausted" || r.Reason != "cost_budget" || len(r.Attempts) != 0 {
		t.Fatalf("receipt %+v %v", r, err)
	}
}

// finishBetweenReads is a store on which a request finishes — its
// reservation leaves the requests in progress and its charge lands, in
// one commit — right after the first of DaySpend's two reads.
type finishBetweenReads struct {
	ledger.Store
	once   sync.Once
	finish func()
}

func (s *finishBetweenReads) Unfinished(ctx context.Context) ([]ledger.Unfinished, error) {
	defer s.once.Do(s.finish)
	return s.Store.Unfinished(ctx)
}

func (s *finishBetweenReads) Spend(ctx context.Context, day int64) (map[string]int64, error) {
	defer s.once.Do(s.finish)
	return s.Store.Spend(ctx, day)
}

// A request that finishes while a Redis that lost the day reads it from
// the store is counted (once or, towards refusing, twice), never missed:
// missed, its charge is gone from the day for good — the three-replica
// soak found a capped tenant 35 µUSD over its ceiling after a Redis
// restart.
func TestDaySpendCountsARequestFinishingWhileItIsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	id := "01a11ve0-0000-7000-8000-000000000001"
	d, _ := json.Marshal(ledger.Dispatch{Ordinal: 1, Route: "primary", Purpose: "initial", NotBefore: now, ReserveUSD: 0.002})
	rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Owner: "me", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now, Data: []byte(`{}`)},
		{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvReserved, At: now, Data: d}}
	if _, _, err := st.Claim(ctx, rec, evs); err != nil {
		t.Fatal(err)
	}
	const charge = 1_500_000 // nano-USD: what the request cost
	s := &finishBetweenReads{Store: st, finish: func() {
		err := st.Finish(ctx, &ledger.Finish{Identity: rec.Identity, RequestID: id, Generation: 1, State: ledger.Succeeded, At: now,
			Events: []ledger.Event{{RequestID: id, Seq: 3, Generation: 1, Type: ledger.EvTerminal, At: now, Data: []byte(`{}`)}},
			Tenant: "acme", Charge: charge})
		if err != nil {
			t.Error(err)
		}
	}}
	spend, err := ledger.DaySpend(ctx, s, ledger.Day(now))
	if err != nil {
		t.Fatal(err)
	}
	if spend["acme"] < charge {
		t.Fatalf("the day's spend read %d nano-USD for tenant acme; the request that finished meanwhile cost %d", spend["acme"], charge)
	}
}

// A request whose stream broke after visible output, cut by a crash after
// the engine decided to resume and before the resume was dispatched: no
// attempt is in flight, yet its key is never released — a client saw
// output — so recovery ends it indeterminate with a stop of its own, and
// its rebuilt receipt passes verify.
func TestRecoveryNeverReleasesAKeyWhoseOutputWasShown(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 5}}))
		_, _, h, err := e.streamOpenAI("chat", prompt)
		if err != nil {
			t.Fatal(err)
		}
		id := h.Get("X-Oncegate-Request-Id")
		if r := e.receipt(id); len(r.Attempts) != 2 || r.Attempts[1].Purpose != "resume" {
			t.Fatalf("the stream was not resumed: %+v", r.Attempts)
		}
		ctx := context.Background()
		evs, err := e.gw.ledger.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// The log as a crash left it: up to the decision to resume.
		cut := slices.IndexFunc(evs, func(ev ledger.Event) bool { return ev.Type == ledger.EvReserved && ev.Seq > 2 })
		if cut < 0 || !recovery.ShownOutput(evs[:cut]) {
			t.Fatalf("no resume reservation after visible output in %d events", len(evs))
		}
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
			State: ledger.InProgress, Owner: "dead-process", Generation: 1, LeaseUntil: evs[0].At.Add(-time.Second), CreatedAt: evs[0].At}
		if _, _, err := st.Claim(ctx, rec, evs[:cut]); err != nil {
			t.Fatal(err)
		}
		g, err := New(e.pol, e.secrets, Options{Ledger: st})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if got, err := st.Get(ctx, rec.Identity); err != nil || got.State != ledger.Indeterminate {
			t.Fatalf("the key of a request whose output was shown: %+v %v", got, err)
		}
		r, err := g.receipt(ctx, "acme", id)
		if err != nil || r.Terminal != "indeterminate" || len(r.Attempts) != 1 {
			t.Fatalf("receipt %+v %v", r, err)
		}
		if err := r.Seal(); err != nil {
			t.Fatal(err)
		}
		if drifts := receipt.Verify(e.pol, r); len(drifts) != 0 {
			t.Fatalf("the recovered receipt does not verify: %v", drifts)
		}
	})
}
