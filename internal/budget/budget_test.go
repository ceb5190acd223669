package budget

import (
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// newTenants are the ceilings of one tenant, acme, at 12:00 on 31 January
// 2026 (the last day of a month), with an empty memory store.
func newTenants(t *testing.T, acme *policy.Tenant) (*Tenants, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC))
	b := &Tenants{Day: quota.New(clk, nil), Store: memory.New(0), Clock: clk}
	b.Spans.Fill(clk)
	if !b.SetTenants([]*policy.Tenant{acme}) {
		t.Fatal("in-process limits could not be given their tenants")
	}
	return b, clk
}

func TestReserveHoldsUnderEveryCeilingOrNone(t *testing.T) {
	for _, c := range []struct {
		name     string
		acme     policy.Tenant
		reserve  gw.NanoUSD
		refused  string
		allowsAt gw.NanoUSD // the allowance after a refusal: nothing held
	}{
		{"fits under all three", policy.Tenant{ID: "acme", CostPerDay: 100, CostPerMonth: 200, CostTotal: 300}, 100, "", 0},
		{"the day refuses", policy.Tenant{ID: "acme", CostPerDay: 50, CostPerMonth: 200, CostTotal: 300}, 100, "day", 50},
		{"the month refuses", policy.Tenant{ID: "acme", CostPerDay: 500, CostPerMonth: 60, CostTotal: 300}, 100, "month", 60},
		{"the lifetime refuses", policy.Tenant{ID: "acme", CostPerDay: 500, CostPerMonth: 200, CostTotal: 70}, 100, "total", 70},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, clk := newTenants(t, &c.acme)
			r, refused := b.Reserve("acme", c.reserve, clk.Now().Add(time.Minute))
			if refused != c.refused {
				t.Fatalf("refused by %q, want %q", refused, c.refused)
			}
			a, capped := b.Allowance("acme")
			if !capped {
				t.Fatal("a tenant with ceilings has no allowance")
			}
			if c.refused != "" {
				if a != c.allowsAt {
					t.Fatalf("after a refusal the allowance is %d, want %d: something stayed held", a, c.allowsAt)
				}
				return
			}
			if a != 0 {
				t.Fatalf("with the whole day reserved the allowance is %d, want 0", a)
			}
			var spent []string
			b.Spent = func(id string) { spent = append(spent, id) }
			b.Settle("acme", r, 40)
			if got := b.Spans.Month.Charged("acme") + b.Spans.Total.Charged("acme") + b.Day.Charged("acme"); got != 120 {
				t.Fatalf("a 40 charge settled under three ceilings adds %d, want 120", got)
			}
			if a, _ := b.Allowance("acme"); a != 60 {
				t.Fatalf("after a 40 charge under a 100 day the allowance is %d, want 60", a)
			}
			if len(spent) != 1 || spent[0] != "acme" {
				t.Fatalf("the watcher was told %v, want [acme]", spent)
			}
		})
	}
}

func TestReleaseHoldsNothingAndChargesNothing(t *testing.T) {
	b, clk := newTenants(t, &policy.Tenant{ID: "acme", CostPerDay: 100, CostPerMonth: 100, CostTotal: 100})
	r, refused := b.Reserve("acme", 100, clk.Now().Add(time.Minute))
	if refused != "" {
		t.Fatalf("refused by %s", refused)
	}
	b.Release(r)
	if a, _ := b.Allowance("acme"); a != 100 {
		t.Fatalf("after a release the allowance is %d, want 100", a)
	}
	if c := b.Day.Charged("acme"); c != 0 {
		t.Fatalf("a release charged %d", c)
	}
}

func TestRefusalNamesTheLongestPeriodInTheWay(t *testing.T) {
	acme := &policy.Tenant{ID: "acme", CostPerDay: 100, CostPerMonth: 150, CostTotal: 1000}
	for _, c := range []struct {
		name       string
		charge     gw.NanoUSD // settled before the refusal
		hold       gw.NanoUSD // reserved by a request in flight
		next       gw.NanoUSD
		attempts   int
		code       string
		retryAfter int
	}{
		// 12:00 on the month's last day: the day and the month both end at midnight.
		{"the day's charges leave no room", 90, 0, 20, 0, api.CodeTenantBudget, 12 * 3600},
		{"requests in flight hold the rest", 10, 85, 20, 0, api.CodeTenantPending, api.PendingRetryAfter(30 * time.Second)},
		{"after attempts the answer is the provider's", 10, 85, 20, 2, api.CodeUpstreamUnavailable, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, clk := newTenants(t, acme)
			var told []string
			b.Refused = func(id, period string) { told = append(told, id+" "+period) }
			until := clk.Now().Add(time.Minute)
			if c.charge > 0 {
				r, _ := b.Reserve("acme", c.charge, until)
				b.Settle("acme", r, c.charge)
			}
			if c.hold > 0 {
				if _, refused := b.Reserve("acme", c.hold, until); refused != "" {
					t.Fatalf("the request in flight was refused by %s", refused)
				}
			}
			e := b.Refusal(acme, c.next, "", c.attempts, 30*time.Second)
			if e == nil || e.Code != c.code {
				t.Fatalf("refusal %+v, want code %s", e, c.code)
			}
			if e.RetryAfter != c.retryAfter {
				t.Fatalf("Retry-After %d, want %d", e.RetryAfter, c.retryAfter)
			}
			if want := c.code == api.CodeTenantBudget; want != (len(told) == 1) {
				t.Fatalf("the watcher was told %v; a spent ceiling tells it once, a pending one never", told)
			}
		})
	}
}

func TestSeedStartsFromWhatTheStoreCharged(t *testing.T) {
	acme := &policy.Tenant{ID: "acme", CostPerDay: 1000, CostPerMonth: 5000, CostTotal: 9000}
	b, clk := newTenants(t, acme)
	ctx := context.Background()
	for _, at := range []time.Time{clk.Now(), clk.Now().Add(-24 * time.Hour), clk.Now().AddDate(0, -1, 0)} {
		if err := b.Store.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: at.String(), Body: []byte(`{}`), Charge: 100, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Seed(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		lim  quota.Ceiling
		want gw.NanoUSD
	}{{"today", b.Day, 100}, {"this month", b.Spans.Month, 200}, {"the lifetime", b.Spans.Total, 300}} {
		if got := c.lim.Charged("acme"); got != c.want {
			t.Errorf("%s seeded with %d, want %d", c.what, got, c.want)
		}
	}
}

func TestSourceListsOnlyTheBudgetsSet(t *testing.T) {
	acme := &policy.Tenant{ID: "acme", CostPerMonth: 500}
	b, clk := newTenants(t, acme)
	src := Source{Tenant: func(id string) *policy.Tenant {
		if id == "acme" {
			return acme
		}
		return nil
	}, Tenants: b, Clock: clk}
	got := src.Budgets(ScopeTenant, "acme")
	if len(got) != 1 || got[0].Period != "month" || got[0].Ceiling != 500 {
		t.Fatalf("budgets %+v, want the month's alone", got)
	}
	if !got[0].Start.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("the month starts %s", got[0].Start)
	}
	r, _ := b.Reserve("acme", 50, clk.Now().Add(time.Minute))
	b.Settle("acme", r, 50)
	if c := got[0].Charged(); c != 50 {
		t.Fatalf("the budget reads %d charged, want 50", c)
	}
	if src.Budgets(ScopeTenant, "nobody") != nil || src.Budgets("galaxy", "acme") != nil {
		t.Fatal("an unknown tenant or scope has budgets")
	}
}
