package gateway

import (
	"context"
	"fmt"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/quota"
)

// A tenant's month and lifetime cost ceilings (docs/overload.md) are
// held like its day's: each attempt's worst case is reserved under all
// three before it is dispatched and settled at its real cost, in this
// process or in Redis, seeded from the store's spend, which retention
// never deletes. They are kept by tenant id in g.tenantSpans, which is
// fed from budget values (quota.Costs), not from the file: a tenant the
// store holds is held alike.

// spendSeeder is limits kept in process, seeded from the store.
type spendSeeder interface {
	Seed(period int64, charged map[string]gw.NanoUSD)
}

// nanoOf converts a store's spend map.
func nanoOf(spend map[string]int64) map[string]gw.NanoUSD {
	out := make(map[string]gw.NanoUSD, len(spend))
	for t, v := range spend {
		out[t] = gw.NanoUSD(v)
	}
	return out
}

// seedSpans gives in-process month and lifetime ceilings what the store
// says each tenant spent this month and over its life (with inFlight,
// what requests left in progress reserved too; see seedSpend).
func (g *Gateway) seedSpans(ctx context.Context, inFlight bool) error {
	now := g.clock.Now()
	for _, p := range []struct {
		lim    quota.Ceiling
		span   ledger.Span
		period int64
	}{
		{g.tenantSpans.Month, ledger.SpanMonth, quota.Month(now)},
		{g.tenantSpans.Total, ledger.SpanTotal, quota.Lifetime(now)},
	} {
		s, ok := p.lim.(spendSeeder)
		if !ok {
			continue
		}
		from, to := p.span.Days(p.period)
		spend, err := g.ledger.TenantSpend(ctx, from, to)
		if inFlight {
			spend, err = ledger.SpanSpend(ctx, g.ledger, p.span, p.period)
		}
		if err != nil {
			return fmt.Errorf("read the tenants' spend this %s from the store: %w", p.span, err)
		}
		s.Seed(p.period, nanoOf(spend))
	}
	return nil
}

// tenantSpan is one of a tenant's cost ceilings as a refusal names it.
type tenantSpan struct {
	name, what, resets string
	ceiling            gw.NanoUSD
	lim                quota.Ceiling
}

// tenantSpanList is the tenant's cost ceilings, the one that lasts
// longest first: when several leave no room, the longest wait is the
// answer.
func (c *call) tenantSpanList() []tenantSpan {
	t := c.tenant
	return []tenantSpan{
		{"total", "lifetime", "it never resets: the gateway's operator must raise the tenant's cost_usd_total", t.CostTotal, c.g.tenantSpans.Total},
		{"month", "monthly", "it resets on the 1st, 00:00 UTC", t.CostPerMonth, c.g.tenantSpans.Month},
		{"day", "daily", "it resets at 00:00 UTC", t.CostPerDay, c.g.tenants},
	}
}

// tenantAllowance is what the tenant may still reserve under its day,
// month and lifetime ceilings; capped is false when it has none.
func (c *call) tenantAllowance() (allowance gw.NanoUSD, capped bool) {
	allowance, capped = c.g.tenants.Allowance(c.tenant.ID)
	if a, ok := c.g.tenantSpans.Allowance(c.tenant.ID); ok {
		if !capped || a < allowance {
			allowance = a
		}
		capped = true
	}
	return allowance, capped
}

// tenantBudgetError is the refusal of a request whose next attempt's
// worst case does not fit under one of its tenant's cost ceilings (day,
// month, lifetime), after n attempts. If what the tenant was charged
// leaves room for it under every ceiling, only reservations of requests
// in flight are in the way, and they settle for less than they hold: 429
// tenant_budget_pending, come back in about the time they take. Charges
// that leave no room are the period's answer: 429 tenant_budget_exceeded
// until the period ends (no Retry-After for the lifetime, which never
// does; docs/overload.md). A request that already made attempts has its
// terminal replayed to its key, so it is not told to come back: 503
// upstream_unavailable.
func (c *call) tenantBudgetError(n int) *api.Error {
	if e := c.keyBudgetError(n); e != nil {
		return e
	}
	next, id := c.cheapestAttempt(), c.tenant.ID
	refused := ""
	if r := c.tenantRefused.Load(); r != nil {
		refused = *r
	}
	var pending *tenantSpan
	spans := c.tenantSpanList()
	for i := range spans {
		s := &spans[i]
		if s.ceiling <= 0 && s.name != refused { // (limits kept elsewhere may refuse without one)
			continue
		}
		if charged := s.lim.Charged(id); charged+next > s.ceiling {
			e := api.Errorf(api.CodeTenantBudget, "tenant %s has reached its %s cost ceiling of $%g ($%g charged; the next attempt's worst case does not fit); %s",
				id, s.what, s.ceiling.USD(), charged.USD(), s.resets)
			e.RetryAfter = quota.Until(c.g.clock.Now(), s.name)
			c.g.budgetRefused(scopeTenant, id, s.name)
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
	e.RetryAfter = api.PendingRetryAfter(c.alias.Engine.Deadline)
	return e
}
