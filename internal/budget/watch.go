package budget

import (
	"time"

	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// The scopes of a budget, as the watcher and oncegate_budget_used_ratio
// name them.
const (
	ScopeTenant = "tenant"
	ScopeKey    = "key"
)

// Source lists the cost budgets set for a tenant or a virtual key, as
// the budget watcher reads them (alerts.Watcher's Source).
type Source struct {
	// Tenant finds a tenant in force, a file's or a team; nil if none.
	Tenant func(id string) *policy.Tenant
	// Tenants hold the tenants' ceilings; Keys, the virtual keys'.
	Tenants *Tenants
	Keys    *keyring.Ring
	// Clock dates the periods.
	Clock interface{ Now() time.Time }
}

// Budgets lists the budgets set for id in scope (ScopeTenant,
// ScopeKey): each period with a ceiling, and how to read its charges.
func (s Source) Budgets(scope, id string) []alerts.Budget {
	var day, month, total gw.NanoUSD
	var lims [3]quota.Ceiling
	switch scope {
	case ScopeTenant:
		t := s.Tenant(id)
		if t == nil {
			return nil
		}
		day, month, total = t.CostPerDay, t.CostPerMonth, t.CostTotal
		lims = [3]quota.Ceiling{s.Tenants.Day, s.Tenants.Spans.Month, s.Tenants.Spans.Total}
	case ScopeKey:
		var known bool
		if day, month, total, known = s.Keys.Costs(id); !known {
			return nil
		}
		l := s.Keys.Limits
		lims = [3]quota.Ceiling{l.Day, l.Month, l.Total}
	default:
		return nil
	}
	now := s.Clock.Now().UTC()
	y, m, d := now.Date()
	spans := []alerts.Budget{
		{Period: "day", Number: gw.Day(now), Start: time.Date(y, m, d, 0, 0, 0, 0, time.UTC), Ceiling: day},
		{Period: "month", Number: quota.Month(now), Start: time.Date(y, m, 1, 0, 0, 0, 0, time.UTC), Ceiling: month},
		{Period: "total", Ceiling: total},
	}
	var out []alerts.Budget
	for i, b := range spans {
		if b.Ceiling > 0 {
			lim := lims[i]
			b.Charged = func() gw.NanoUSD { return lim.Charged(id) }
			out = append(out, b)
		}
	}
	return out
}
