package gateway

import (
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/budget"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/retry"
)

// permit is what a dispatched attempt holds until it is observed: its
// route's breaker ticket and the tenant's reservation.
type permit struct {
	route  string
	ticket breaker.Ticket
	tenant budget.Reservation   // under the tenant's day, month and lifetime
	key    keyring.Reservations // under the request's virtual key
}

// admission snapshots the fleet's state for the engine: open breakers,
// the routes that cool (docs/retries.md), the providers' retry budgets
// (for attempts after the first) and the tenant's remaining allowance.
func (c *call) admission(retrying bool) retry.Admission {
	var adm retry.Admission
	for _, r := range c.alias.Routes {
		if !c.g.breakers.Allows(r.ID) {
			if adm.Refused == nil {
				adm.Refused = map[string]bool{}
			}
			adm.Refused[r.ID] = true
		}
		if p := r.Provider.ID; retrying && !adm.RetryRefused[p] && !c.g.budget.Allows(p) {
			if adm.RetryRefused == nil {
				adm.RetryRefused = map[string]bool{}
			}
			adm.RetryRefused[p] = true
		}
	}
	adm.TenantAllowance, adm.TenantCapped = c.g.costs.Allowance(c.tenant.ID)
	adm.TenantAllowance, adm.TenantCapped = c.key.Narrow(adm.TenantAllowance, adm.TenantCapped, c.keyTokens())
	ids := make([]string, len(c.alias.Routes))
	for i, r := range c.alias.Routes {
		ids[i] = r.ID
	}
	adm.Cooling = c.g.load.Cooling(ids)
	if c.alias.ChoosesByLoad() {
		adm.Figures = make(map[string]retry.Figures, len(c.alias.Routes))
		for _, r := range c.alias.Routes {
			adm.Figures[r.ID] = c.g.load.Figures(r.ID)
		}
	}
	return adm
}

// acquire takes what dispatching d needs: the route's breaker ticket, the
// tenant's reservation of d's worst case, and — for an attempt on a
// provider this request already tried (besides the routes inFlight), a
// retry — a retry from that provider's budget; an attempt on a provider
// new to the request counts as a first attempt there. (A request's very
// first attempt is counted once its request is claimed: a replay is no
// first attempt.) If one is refused (a concurrent request took the last
// of it since the snapshot), it gives back what it took, tightens adm
// accordingly and returns false.
func (c *call) acquire(d retry.Decision, first bool, adm *retry.Admission, inFlight ...string) (*permit, bool) {
	c.key.ForgetRefusal() // a refusal is this acquisition's, if any
	t, ok := c.g.breakers.Acquire(d.Route)
	if !ok {
		if adm.Refused == nil {
			adm.Refused = map[string]bool{}
		}
		adm.Refused[d.Route] = true
		return nil, false
	}
	res, refused := c.g.costs.Reserve(c.tenant.ID, d.Reserve, c.deadline.Add(c.g.lease))
	if refused != "" {
		c.tenantRefused.Store(&refused)
		c.g.breakers.Done(d.Route, t, breaker.Ignore)
		a, _ := c.g.costs.Allowance(c.tenant.ID)
		adm.TenantCapped, adm.TenantAllowance = true, min(a, max(0, d.Reserve-1))
		return nil, false
	}
	kres, ok := c.key.Reserve(d.Reserve, c.keyTokens(), c.deadline.Add(c.g.lease))
	if !ok {
		c.g.breakers.Done(d.Route, t, breaker.Ignore)
		c.g.costs.Release(res)
		a := adm.TenantAllowance
		if !adm.TenantCapped {
			a = d.Reserve
		}
		adm.TenantCapped, adm.TenantAllowance = true, min(a, max(0, d.Reserve-1))
		return nil, false
	}
	if prov := c.providerOf(d.Route); !first && c.triedProvider(prov, inFlight...) {
		if !c.g.budget.Retry(prov) {
			c.g.breakers.Done(d.Route, t, breaker.Ignore)
			c.g.costs.Release(res)
			c.key.Settle(kres, 0, gw.Usage{})
			if adm.RetryRefused == nil {
				adm.RetryRefused = map[string]bool{}
			}
			adm.RetryRefused[prov] = true
			return nil, false
		}
	} else if !first {
		c.g.budget.First(prov) // a fallback: a first attempt on this provider
	}
	c.g.load.Begin(d.Route)
	c.g.metrics.ObserveRouteSelected(c.alias.Name, d.Route, c.alias.StrategyName())
	return &permit{route: d.Route, ticket: t, tenant: res, key: kres}, true
}

// providerOf is the provider of one of the alias's routes.
func (c *call) providerOf(route string) string {
	if r := c.alias.Route(route); r != nil {
		return r.Provider.ID
	}
	return ""
}

// triedProvider reports whether this request already had an attempt on
// provider, counting the routes inFlight (a hedged attempt not observed
// yet).
func (c *call) triedProvider(provider string, inFlight ...string) bool {
	for _, a := range c.rec.R.Attempts {
		if c.providerOf(a.Route) == provider {
			return true
		}
	}
	for _, r := range inFlight {
		if c.providerOf(r) == provider {
			return true
		}
	}
	return false
}

// admit acquires what the decision d (taken under adm) dispatches with;
// each refusal tightens the admission and the engine decides again, until
// the permit is held or the decision dispatches nothing.
func (c *call) admit(d retry.Decision, adm retry.Admission) (retry.Decision, *permit, error) {
	first := len(c.rec.R.Attempts) == 0
	for d.Dispatches() {
		p, ok := c.acquire(d, first, &adm)
		if ok {
			return d, p, nil
		}
		var err error
		if d, err = c.rec.Redecide(adm); err != nil {
			return d, nil, err
		}
		c.log.amend(ledger.EvDecision, c.rec.R.Decisions[len(c.rec.R.Decisions)-1])
	}
	return d, nil, nil
}

// release hands an observed attempt's permit back: its outcome to the
// route's breaker and its real cost to the tenant's ledger.
func (c *call) release(p *permit, res *attemptResult) {
	if p == nil {
		return
	}
	outcome, cost, tokens, usage := breaker.Ignore, gw.NanoUSD(0), int64(0), gw.Usage{}
	if res != nil {
		outcome = breaker.OutcomeOf(res.obs.Kind)
		cost, usage = res.route.Price.Cost(res.obs.Usage), res.obs.Usage
		tokens = res.obs.Usage.InputTokens + res.obs.Usage.OutputTokens
		if fb := res.obs.FirstByteAt; fb != nil && res.obs.Kind == gw.KindOK {
			c.g.load.TTFT(p.route, fb.Sub(res.obs.StartedAt))
		}
	}
	if res != nil {
		c.cool(res)
	}
	c.g.load.End(p.route, tokens)
	c.g.breakers.Done(p.route, p.ticket, outcome)
	c.g.costs.Settle(c.tenant.ID, p.tenant, cost)
	c.key.Settle(p.key, cost, usage)
}

// cool cools an observed attempt's route down, fleet-wide, when its
// rate-limit hint is longer than the route's next backoff
// (docs/retries.md): before the next decision's admission is taken, so
// that its receipt shows the cooling.
func (c *call) cool(res *attemptResult) {
	if res.obs.Kind != gw.KindRateLimited || res.obs.RetryAfter == nil {
		return
	}
	onRoute := 1
	for _, a := range c.rec.R.Attempts {
		if a.Route == res.route.ID {
			onRoute++
		}
	}
	a := retry.Attempt{Kind: res.obs.Kind, ObservedAt: res.obs.ObservedAt, RetryAfter: *res.obs.RetryAfter, HasRetryAfter: true}
	if until, ok := retry.CoolsUntil(c.alias.Engine, &a, onRoute); ok {
		c.g.load.Cool(res.route.ID, until)
	}
}
