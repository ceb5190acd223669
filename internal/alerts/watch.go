// Package alerts watches the budgets of tenants and virtual keys
// (docs/operations.md, "Budget alerts"): it keeps the gauge
// budget_used_ratio{scope,id,period} and, when a budget crosses 80 % and
// 100 % of its ceiling, posts one signed event to a webhook. Nothing in
// it runs on a request's path: the request path only says which budget
// spent (Watcher.Check), which never blocks.
package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Thresholds are the fractions of a ceiling an event is sent at.
var Thresholds = []float64{0.8, 1}

// Budget is one cost ceiling of a tenant or key as the watcher reads it.
type Budget struct {
	// Period is "day", "month" or "total".
	Period string
	// Number numbers the period now (a day, a month; 0 for the lifetime):
	// a crossing is sent once per period.
	Number int64
	// Start is when the period began (zero for the lifetime).
	Start time.Time
	// Ceiling is the budget, never 0.
	Ceiling gw.NanoUSD
	// Charged reads what was charged in the period (it may ask Redis).
	Charged func() gw.NanoUSD
}

// Source lists the budgets set for id in scope ("tenant" or "key"): none
// when it has no ceilings (or is gone).
type Source func(scope, id string) []Budget

// Gauge keeps the ratio of spend to ceiling per budget (metrics.Metrics).
type Gauge interface {
	SetBudgetRatio(scope, id, period string, ratio float64)
}

// Once decides which replica sends a crossing: First is true for exactly
// one caller per key (the first), false for the rest; ttl bounds how
// long the key is remembered (0: for ever).
type Once interface {
	First(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// Sender delivers events (*Webhook); Send never blocks.
type Sender interface {
	Send(Event)
}

// Event is what a webhook receives when a budget crosses a threshold.
type Event struct {
	// ID names the crossing; a receiver that sees it twice may drop the
	// second.
	ID          string    `json:"id"`
	Type        string    `json:"type"` // "budget.threshold_crossed"
	Scope       string    `json:"scope"`
	Subject     string    `json:"subject"` // the tenant's or key's id
	Period      string    `json:"period"`
	PeriodStart string    `json:"period_start,omitempty"`
	Threshold   float64   `json:"threshold"`
	Ratio       float64   `json:"ratio"`
	SpentUSD    float64   `json:"spent_usd"`
	CeilingUSD  float64   `json:"ceiling_usd"`
	At          time.Time `json:"at"`
}

// Watcher recomputes the budgets it is told spent, in its own goroutine
// (Run): it sets their gauges and sends each threshold crossing once.
// Check coalesces: a budget told a thousand times before the watcher
// gets to it is read once. Safe for concurrent use.
type Watcher struct {
	Source Source
	Gauge  Gauge
	// Once, when not nil, decides the sender of a crossing across
	// replicas; nil: this process alone.
	Once Once
	// Sender, when not nil, receives the crossings.
	Sender Sender
	Log    *slog.Logger
	Now    func() time.Time

	mu sync.Mutex
	// pending are the budgets to read, in the order they were first
	// told (so that events leave in that order), with the periods that
	// refused a request.
	pending []pendingCheck
	queued  map[[2]string]int // index in pending
	wake    chan struct{}
	sent    map[string]bool // crossings handled here
}

// pendingCheck is a tenant or key to read again.
type pendingCheck struct {
	scope, id string
	refused   map[string]bool // periods that refused a request
}

// maxSent bounds the crossings remembered in process.
const maxSent = 100000

// Check tells the watcher that id in scope spent (or its budget
// changed); it never blocks.
func (w *Watcher) Check(scope, id string) { w.tell(scope, id, "") }

// Refused tells the watcher that id's budget of period refused a
// request because the next attempt's worst case no longer fits: the
// budget is spent (its 100 % event) even though its charges, which
// never pass the ceiling, may stay under it. It never blocks.
func (w *Watcher) Refused(scope, id, period string) { w.tell(scope, id, period) }

func (w *Watcher) tell(scope, id, refused string) {
	w.mu.Lock()
	if w.queued == nil {
		w.queued, w.wake = map[[2]string]int{}, make(chan struct{}, 1)
	}
	k := [2]string{scope, id}
	i, ok := w.queued[k]
	if !ok {
		i = len(w.pending)
		w.queued[k] = i
		w.pending = append(w.pending, pendingCheck{scope: scope, id: id})
	}
	if refused != "" {
		if w.pending[i].refused == nil {
			w.pending[i].refused = map[string]bool{}
		}
		w.pending[i].refused[refused] = true
	}
	wake := w.wake
	w.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Run recomputes what Check names until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.Check("", "") // makes the channel; an empty scope lists nothing
	w.mu.Lock()
	wake := w.wake
	w.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		w.mu.Lock()
		todo := w.pending
		w.pending, w.queued = nil, map[[2]string]int{}
		w.mu.Unlock()
		for _, p := range todo {
			if p.scope != "" {
				w.recompute(ctx, p)
			}
		}
	}
}

// recompute sets id's gauges and sends its new crossings.
func (w *Watcher) recompute(ctx context.Context, p pendingCheck) {
	scope, id := p.scope, p.id
	for _, b := range w.Source(scope, id) {
		spent := b.Charged()
		ratio := float64(spent) / float64(b.Ceiling)
		w.Gauge.SetBudgetRatio(scope, id, b.Period, ratio)
		for _, th := range Thresholds {
			if ratio >= th || th == 1 && p.refused[b.Period] {
				w.cross(ctx, scope, id, b, th, ratio, spent)
			}
		}
	}
}

// cross sends a crossing unless it was sent (here, or by another
// replica).
func (w *Watcher) cross(ctx context.Context, scope, id string, b Budget, th, ratio float64, spent gw.NanoUSD) {
	key := fmt.Sprintf("%s|%s|%s|%d|%d|%g", scope, id, b.Period, b.Number, b.Ceiling, th)
	w.mu.Lock()
	done := w.sent[key]
	if !done {
		if w.sent == nil || len(w.sent) >= maxSent {
			w.sent = map[string]bool{}
		}
		w.sent[key] = true
	}
	w.mu.Unlock()
	if done || w.Sender == nil {
		return
	}
	if w.Once != nil {
		first, err := w.Once.First(ctx, "budgetalert:"+key, ttlOf(b.Period))
		if err != nil {
			w.mu.Lock()
			delete(w.sent, key) // the next check tries again
			w.mu.Unlock()
			w.Log.Error("could not tell whether another replica sent a budget alert: not sending it", "scope", scope, "id", id, "period", b.Period, "threshold", th, "err", err)
			return
		}
		if !first {
			return
		}
	}
	ev := Event{ID: eventID(key), Type: "budget.threshold_crossed", Scope: scope, Subject: id, Period: b.Period,
		Threshold: th, Ratio: ratio, SpentUSD: spent.USD(), CeilingUSD: b.Ceiling.USD(), At: w.Now().UTC()}
	if !b.Start.IsZero() {
		ev.PeriodStart = b.Start.UTC().Format(time.RFC3339)
	}
	w.Sender.Send(ev)
}

// ttlOf is how long a crossing of a period is remembered across
// replicas: past the period's end.
func ttlOf(period string) time.Duration {
	switch period {
	case "day":
		return 48 * time.Hour
	case "month":
		return 32 * 24 * time.Hour
	}
	return 0
}
