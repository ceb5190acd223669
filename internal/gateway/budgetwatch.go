package gateway

import (
	"time"

	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/jobs"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// The budget gauges and alerts (docs/operations.md, "Budget alerts"):
// each settled attempt tells the watcher its tenant's and key's budgets
// spent; the watcher, in its own goroutine, reads their spend, sets
// oncegate_budget_used_ratio and sends each crossing of 80 % and 100 %
// to the budget webhook once. The request path never waits on it.

// The scopes of a budget.
const (
	scopeTenant = "tenant"
	scopeKey    = "key"
)

// watchBudgets makes the watcher (and the webhook when one is
// configured), and has it start from the spend seeded at start.
func (g *Gateway) watchBudgets(pol *policy.Policy, secrets *config.Secrets, opts Options) {
	w := &alerts.Watcher{Source: g.budgetsOf, Gauge: g.metrics, Once: opts.AlertsOnce, Log: g.log, Now: g.clock.Now}
	if w.Once == nil {
		w.Once = &alerts.StoreOnce{Store: g.ledger}
	}
	if wh := pol.Config.Alerts.BudgetWebhook; wh.URL != "" {
		c := opts.BudgetWebhook
		c.URL, c.Log, c.Count = wh.URL, g.log, g.metrics
		if secrets != nil {
			c.Secret = []byte(secrets.BudgetWebhookSecret)
		}
		g.webhook = alerts.NewWebhook(c)
		w.Sender = g.webhook
	}
	g.budgets = w
	g.keys.OnSeed = func(id string) { w.Check(scopeKey, id) }
	for _, t := range pol.Tenants {
		if t.CostPerDay+t.CostPerMonth+t.CostTotal > 0 {
			w.Check(scopeTenant, t.ID)
		}
	}
}

// startBudgetJobs runs the watcher and the webhook until Close.
func (g *Gateway) startBudgetJobs() {
	now := func() time.Duration { return 0 }
	g.jobs.Start(jobs.Job{Name: "budget-watch", Every: now, Run: g.budgets.Run})
	if g.webhook != nil {
		g.jobs.Start(jobs.Job{Name: "budget-webhook", Every: now, Run: g.webhook.Run})
	}
}

// watchBudget tells the watcher that id in scope spent.
func (g *Gateway) watchBudget(scope, id string) {
	if g.budgets != nil {
		g.budgets.Check(scope, id)
	}
}

// budgetRefused tells the watcher that id's budget of period refused a
// request: it is spent.
func (g *Gateway) budgetRefused(scope, id, period string) {
	if g.budgets != nil {
		g.budgets.Refused(scope, id, period)
	}
}

// budgetsOf lists the cost budgets set for a tenant or key, as the
// watcher reads them.
func (g *Gateway) budgetsOf(scope, id string) []alerts.Budget {
	var day, month, total gw.NanoUSD
	var lims [3]quota.Ceiling
	switch scope {
	case scopeTenant:
		t := g.policy().Tenant(id)
		if t == nil && g.keys != nil { // a team (docs/keys-and-teams.md)
			for _, team := range g.keys.Teams() {
				if team.ID == id {
					t = team
				}
			}
		}
		if t == nil {
			return nil
		}
		day, month, total = t.CostPerDay, t.CostPerMonth, t.CostTotal
		lims = [3]quota.Ceiling{g.tenants, g.tenantSpans.Month, g.tenantSpans.Total}
	case scopeKey:
		var known bool
		if day, month, total, known = g.keys.Costs(id); !known {
			return nil
		}
		l := g.keys.Limits
		lims = [3]quota.Ceiling{l.Day, l.Month, l.Total}
	default:
		return nil
	}
	now := g.clock.Now().UTC()
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
