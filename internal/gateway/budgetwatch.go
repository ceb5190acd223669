package gateway

import (
	"time"

	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/budget"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/jobs"
	"github.com/oncegate/oncegate/internal/policy"
)

// The budget gauges and alerts (docs/operations.md, "Budget alerts"):
// each settled attempt tells the watcher its tenant's and key's budgets
// spent; the watcher, in its own goroutine, reads their spend, sets
// oncegate_budget_used_ratio and sends each crossing of 80 % and 100 %
// to the budget webhook once. The request path never waits on it.

// watchBudgets makes the watcher (and the webhook when one is
// configured), has the tenants' ceilings and the keys' limits tell it
// what they charge and refuse, and has it start from the spend seeded at
// start.
func (g *Gateway) watchBudgets(pol *policy.Policy, secrets *config.Secrets, opts Options) {
	src := budget.Source{Tenant: g.tenantInForce, Tenants: g.costs, Keys: g.keys, Clock: g.clock}
	w := &alerts.Watcher{Source: src.Budgets, Gauge: g.metrics, Once: opts.AlertsOnce, Log: g.log, Now: g.clock.Now}
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
	g.costs.Spent = func(id string) { w.Check(budget.ScopeTenant, id) }
	g.costs.Refused = func(id, period string) { w.Refused(budget.ScopeTenant, id, period) }
	g.keys.OnSeed = func(id string) { w.Check(budget.ScopeKey, id) }
	g.keys.OnSpent = g.keys.OnSeed
	g.keys.OnRefused = func(id, period string) { w.Refused(budget.ScopeKey, id, period) }
	for _, t := range pol.Tenants {
		if t.CostPerDay+t.CostPerMonth+t.CostTotal > 0 {
			w.Check(budget.ScopeTenant, t.ID)
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
