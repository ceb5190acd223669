package keyring

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/vkey"
)

// A key's use reserves an attempt's tokens and cost under each of its
// limits or under none; the limit that refused names the refusal, and a
// settled attempt charges each limit and tells the budget watcher.
func TestAKeysUseReservesUnderEveryLimitOrNone(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	st := memory.New(0)
	deployment := []byte("deployment-secret")
	secret, display := vkey.New()
	k := &ledger.Key{ID: vkey.NewID(), Tenant: "acme", Digest: vkey.Digest(deployment, secret), Prefix: display,
		Spec: ledger.KeySpec{Budget: ledger.KeyBudget{TokensPerMinute: 1000, CostUSDPerDay: 1, CostUSDPerMonth: 0.5}}, CreatedAt: clk.Now(), Version: 1}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	pol := &policy.Policy{Tenants: []*policy.Tenant{{ID: "acme", MaxBoundary: gw.BoundaryExternal}}}
	ring := New(st, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(nil), deployment, func() *policy.Policy { return pol }, Limits{}, nil)
	var spent, refused []string
	ring.OnSpent = func(id string) { spent = append(spent, id) }
	ring.OnRefused = func(id, period string) { refused = append(refused, period) }
	lk, err := ring.Lookup(ctx, secret)
	if err != nil || lk == nil {
		t.Fatalf("lookup: %v %v", lk, err)
	}
	u := ring.Use(lk, 30*time.Second)
	until := clk.Now().Add(time.Minute)
	half := gw.NanoFromUSD(0.4)

	if e := u.Refusal(half, 600); e != nil {
		t.Fatalf("an attempt within every limit refused: %v", e)
	}
	r, ok := u.Reserve(half, 600, until)
	if !ok {
		t.Fatal("an attempt within every limit could not reserve")
	}
	// A second attempt: its tokens do not fit the minute beside the first's.
	if _, ok := u.Reserve(half, 600, until); ok {
		t.Fatal("1,200 tokens reserved under a 1,000 a minute limit")
	}
	if e := u.BudgetError(0, half, 600); e == nil || e.Code != api.CodeKeyRateLimited {
		t.Fatalf("the minute's refusal is %+v, want %s", e, api.CodeKeyRateLimited)
	}
	if a, capped := u.Narrow(0, false, 600); !capped || a != 0 {
		t.Fatalf("with the minute's tokens held the allowance is %d (capped %v), want 0", a, capped)
	}
	u.Settle(r, half, gw.Usage{InputTokens: 100, OutputTokens: 100})
	if len(spent) != 1 || spent[0] != k.ID {
		t.Fatalf("the watcher was told %v, want the key once", spent)
	}
	// The month's $0.50 now holds $0.40: the next $0.40 does not fit, and
	// nothing the refused reservation took stays held.
	u.ForgetRefusal()
	if _, ok := u.Reserve(half, 100, until); ok {
		t.Fatal("$0.80 reserved under a $0.50 month")
	}
	if got := ring.Limits.Tokens.Charged(k.ID); got != 200 {
		t.Fatalf("the minute holds %d tokens charged, want the 200 used", got)
	}
	if a, _ := ring.Limits.Day.Allowance(k.ID); a != gw.NanoFromUSD(1)-half {
		t.Fatalf("the day's allowance is %d after a refused month: the day's reservation stayed held", a)
	}
	e := u.BudgetError(1, half, 100)
	if e == nil || e.Code != api.CodeUpstreamUnavailable {
		t.Fatalf("after an attempt the key's refusal is %+v, want %s", e, api.CodeUpstreamUnavailable)
	}
	if e := u.BudgetError(0, half, 100); e == nil || e.Code != api.CodeKeyBudget || e.RetryAfter <= 0 {
		t.Fatalf("the month's refusal is %+v, want %s with a Retry-After", e, api.CodeKeyBudget)
	}
	if len(refused) == 0 || refused[len(refused)-1] != "month" {
		t.Fatalf("the watcher was told %v refused, want the month", refused)
	}
	var none *Use
	if _, ok := none.Reserve(half, 100, until); !ok || none.Refusal(half, 100) != nil || none.BudgetError(0, half, 100) != nil {
		t.Fatal("a request without a key was refused")
	}
}
