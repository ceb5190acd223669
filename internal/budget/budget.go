// Package budget is the tenants' cost ceilings over their three periods
// — the UTC day, the month and the lifetime (docs/overload.md) — as the
// request path uses them: what a tenant may still reserve, an attempt's
// worst case reserved under all three before it is dispatched and
// settled at its real cost, the refusal that names the ceiling in the
// way, and the spend they are seeded with from the store, so that a
// restart hands no tenant a fresh budget. It also lists every cost
// budget set, a tenant's or a virtual key's, for the budget watcher
// (internal/alerts, docs/operations.md "Budget alerts").
//
// The ceilings themselves are quota.Ceilings, kept in this process or in
// Redis; a virtual key's own limits are the key ring's (keyring.Use).
package budget

import (
	"context"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// Tenants are the tenants' cost ceilings, by tenant id. They are fed
// from budget values (policy.TenantCostsOf), not from the file: a team
// the store holds is held as a file tenant is.
type Tenants struct {
	// Day holds the day's ceilings: the tenant limits, which hold the
	// tenants' rates too.
	Day quota.Ceiling
	// Spans hold the month's and the lifetime's.
	Spans quota.Spans
	// Store is where the spend they are seeded with is read.
	Store ledger.Store
	// Clock dates periods.
	Clock clock.Clock
	// Spent, when not nil, is told a tenant's id each time an attempt
	// settled a charge; Refused, when one of its ceilings (period "day",
	// "month" or "total") refused a request for lack of room.
	Spent   func(id string)
	Refused func(id, period string)
}

// Reservation is an attempt's worst case held under its tenant's three
// ceilings.
type Reservation struct {
	day   quota.Reservation
	spans quota.SpanReservations
}

// Reserve holds cost under tenant id's day, month and lifetime until
// `until` at the latest. When one does not fit it holds nothing and
// names its period ("day", "month", "total").
func (b *Tenants) Reserve(id string, cost gw.NanoUSD, until time.Time) (Reservation, string) {
	day, ok := b.Day.Reserve(id, cost, until)
	if !ok {
		return Reservation{}, "day"
	}
	spans, refused := b.Spans.Reserve(id, cost, until)
	if refused != "" {
		b.Day.Settle(day, 0)
		return Reservation{}, refused
	}
	return Reservation{day: day, spans: spans}, ""
}

// Release gives back a reservation whose attempt was never made.
func (b *Tenants) Release(r Reservation) {
	b.Day.Settle(r.day, 0)
	b.Spans.Settle(r.spans, 0)
}

// Settle releases tenant id's reservation and charges the attempt's real
// cost under each ceiling.
func (b *Tenants) Settle(id string, r Reservation, cost gw.NanoUSD) {
	b.Day.Settle(r.day, cost)
	b.Spans.Settle(r.spans, cost)
	if b.Spent != nil {
		b.Spent(id)
	}
}

// Allowance is what tenant id may still reserve under its day, month and
// lifetime ceilings; capped is false when it has none.
func (b *Tenants) Allowance(id string) (allowance gw.NanoUSD, capped bool) {
	allowance, capped = b.Day.Allowance(id)
	if a, ok := b.Spans.Allowance(id); ok {
		if !capped || a < allowance {
			allowance = a
		}
		capped = true
	}
	return allowance, capped
}

// SetTenants gives the ceilings those of the tenants in force (the
// file's and the teams); false if the day's limits are not ones whose
// tenants can be replaced.
func (b *Tenants) SetTenants(in []*policy.Tenant) bool {
	b.Spans.SetCosts(policy.TenantCostsOf(in))
	t, ok := b.Day.(interface {
		SetLimits(map[string]quota.Tenant)
	})
	if ok {
		t.SetLimits(policy.TenantLimitsOf(in))
	}
	return ok
}

// span is one of a tenant's cost ceilings as a refusal names it.
type span struct {
	name, what, resets string
	ceiling            gw.NanoUSD
	lim                quota.Ceiling
}

// spans are tenant t's cost ceilings, the one that lasts longest first:
// when several leave no room, the longest wait is the answer.
func (b *Tenants) spans(t *policy.Tenant) []span {
	return []span{
		{"total", "lifetime", "it never resets: the gateway's operator must raise the tenant's cost_usd_total", t.CostTotal, b.Spans.Total},
		{"month", "monthly", "it resets on the 1st, 00:00 UTC", t.CostPerMonth, b.Spans.Month},
		{"day", "daily", "it resets at 00:00 UTC", t.CostPerDay, b.Day},
	}
}

// Refusal is the refusal of a request whose next attempt's worst case
// (next) does not fit under one of tenant t's cost ceilings, after n
// attempts; refused names the ceiling that refused the last reservation
// ("" if none did), and deadline is the alias's. If what the tenant was
// charged leaves room for it under every ceiling, only reservations of
// requests in flight are in the way, and they settle for less than they
// hold: 429 tenant_budget_pending, come back in about the time they
// take. Charges that leave no room are the period's answer: 429
// tenant_budget_exceeded until the period ends (no Retry-After for the
// lifetime, which never does; docs/overload.md). A request that already
// made attempts has its terminal replayed to its key, so it is not told
// to come back: 503 upstream_unavailable.
func (b *Tenants) Refusal(t *policy.Tenant, next gw.NanoUSD, refused string, n int, deadline time.Duration) *api.Error {
	id := t.ID
	var pending *span
	spans := b.spans(t)
	for i := range spans {
		s := &spans[i]
		if s.ceiling <= 0 && s.name != refused { // (limits kept elsewhere may refuse without one)
			continue
		}
		if charged := s.lim.Charged(id); charged+next > s.ceiling {
			e := api.Errorf(api.CodeTenantBudget, "tenant %s has reached its %s cost ceiling of $%g ($%g charged; the next attempt's worst case does not fit); %s",
				id, s.what, s.ceiling.USD(), charged.USD(), s.resets)
			e.RetryAfter = quota.Until(b.Clock.Now(), s.name)
			if b.Refused != nil {
				b.Refused(id, s.name)
			}
			return e
		}
		if a, _ := s.lim.Allowance(id); pending == nil && a < next {
			pending = s
		}
	}
	if pending == nil { // kept elsewhere, allowances leave reservations out
		pending = &spans[len(spans)-1]
		for i := range spans {
			if spans[i].name == refused {
				pending = &spans[i]
			}
		}
	}
	charged := pending.lim.Charged(id)
	if n > 0 {
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered, and the requests tenant %s has in flight hold what is left of its %s cost ceiling after %d attempts", id, pending.what, n)
	}
	e := api.Errorf(api.CodeTenantPending, "tenant %s's requests in flight hold what is left of its %s cost ceiling of $%g ($%g charged so far); retry once they finish",
		id, pending.what, pending.ceiling.USD(), charged.USD())
	e.RetryAfter = api.PendingRetryAfter(deadline)
	return e
}

// spendSeeder is ceilings kept in process, seeded from the store.
type spendSeeder interface {
	Seed(period int64, charged map[string]gw.NanoUSD)
}

// Seed gives the ceilings kept in process what the store says each
// tenant spent today, this month and over its life, so that a restart
// does not hand a tenant a fresh budget (docs/overload.md). At a start
// (inFlight) that includes what requests the last process left in
// progress reserved; after recovery has charged them, the charges alone.
// Ceilings kept in Redis are left as they are: they outlive a process.
func (b *Tenants) Seed(ctx context.Context, inFlight bool) error {
	now := b.Clock.Now()
	if s, ok := b.Day.(spendSeeder); ok {
		day := gw.Day(now)
		spend, err := b.Store.Spend(ctx, day)
		if inFlight {
			spend, err = ledger.DaySpend(ctx, b.Store, day)
		}
		if err != nil {
			return fmt.Errorf("read today's spend from the store: %w", err)
		}
		s.Seed(day, nanoOf(spend))
	}
	for _, p := range []struct {
		lim    quota.Ceiling
		span   ledger.Span
		period int64
	}{
		{b.Spans.Month, ledger.SpanMonth, quota.Month(now)},
		{b.Spans.Total, ledger.SpanTotal, quota.Lifetime(now)},
	} {
		s, ok := p.lim.(spendSeeder)
		if !ok {
			continue
		}
		from, to := p.span.Days(p.period)
		spend, err := b.Store.TenantSpend(ctx, from, to)
		if inFlight {
			spend, err = ledger.SpanSpend(ctx, b.Store, p.span, p.period)
		}
		if err != nil {
			return fmt.Errorf("read the tenants' spend this %s from the store: %w", p.span, err)
		}
		s.Seed(p.period, nanoOf(spend))
	}
	return nil
}

// nanoOf converts a store's spend map.
func nanoOf(spend map[string]int64) map[string]gw.NanoUSD {
	out := make(map[string]gw.NanoUSD, len(spend))
	for t, v := range spend {
		out[t] = gw.NanoUSD(v)
	}
	return out
}
