package policy

import (
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/retry"
)

// What the overload protection takes from a policy (docs/overload.md):
// the breakers', the retry budget's, the load table's and the tenant
// limits' configurations, in the shapes those packages take.

// ChoosesByLoad reports whether the alias's strategy chooses within a
// tier by the routes' load, so that the admission must carry their
// figures (and the receipt records them).
func (a *Alias) ChoosesByLoad() bool {
	switch a.Engine.Strategy {
	case retry.StrategyLeastBusy, retry.StrategyLatency, retry.StrategyQuota:
		return a.Engine.Tiered
	}
	return false
}

// StrategyName is the alias's strategy as the metrics name it.
func (a *Alias) StrategyName() string {
	if a.Engine.Strategy == "" {
		return string(retry.StrategyOrdered)
	}
	return string(a.Engine.Strategy)
}

// BreakerConfig is the policy's breaker section as breakers take it.
func (pol *Policy) BreakerConfig() breaker.Config {
	b := pol.Breaker
	return breaker.Config{FailureRatio: b.FailureRatio, MinRequests: b.MinRequests, Window: b.Window.D(),
		OpenFor: b.OpenFor.D(), HalfOpenProbes: b.HalfOpenProbes}
}

// BudgetConfig is the policy's retry_budget as the budget takes it.
func (pol *Policy) BudgetConfig() breaker.BudgetConfig {
	rb := pol.RetryBudget
	return breaker.BudgetConfig{Ratio: rb.Ratio, MinPerSecond: rb.MinPerSecond, Window: rb.Window.D()}
}

// RouteIDs lists the policy's routes, in order.
func (pol *Policy) RouteIDs() []string {
	ids := make([]string, len(pol.Routes))
	for i, r := range pol.Routes {
		ids[i] = r.ID
	}
	return ids
}

// LoadLimits is each route's own rate limits as the load table takes
// them, and whether a strategy chooses by its load.
func (pol *Policy) LoadLimits() map[string]load.Limits {
	lim := map[string]load.Limits{}
	for _, r := range pol.Routes {
		lim[r.ID] = load.Limits{RPM: r.RPM, TPM: r.TPM}
	}
	for _, a := range pol.Aliases {
		if a.ChoosesByLoad() {
			for _, r := range a.Routes {
				l := lim[r.ID]
				l.Share = true
				lim[r.ID] = l
			}
		}
	}
	return lim
}

// TenantLimits is each tenant's budget as the limits take it.
func (pol *Policy) TenantLimits() map[string]quota.Tenant { return TenantLimitsOf(pol.Tenants) }

// TenantLimitsOf is the budgets of tenants as the limits take them: the
// file's, and teams (docs/keys-and-teams.md) made tenants.
func TenantLimitsOf(tenants []*Tenant) map[string]quota.Tenant {
	lim := map[string]quota.Tenant{}
	for _, t := range tenants {
		lim[t.ID] = quota.Tenant{RequestsPerMinute: t.RequestsPerMinute, CostPerDay: t.CostPerDay}
	}
	return lim
}

// TenantCosts is each tenant's month and lifetime cost ceilings as the
// limits take them (quota.Spans.SetCosts).
func (pol *Policy) TenantCosts() map[string]quota.Costs { return TenantCostsOf(pol.Tenants) }

// TenantCostsOf is TenantCosts of any tenants: the file's and the teams.
func TenantCostsOf(tenants []*Tenant) map[string]quota.Costs {
	c := map[string]quota.Costs{}
	for _, t := range tenants {
		c[t.ID] = quota.Costs{Month: t.CostPerMonth, Total: t.CostTotal}
	}
	return c
}
