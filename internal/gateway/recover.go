package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/receipt"
)

// recover settles every request a previous process left unfinished (DESIGN
// §3.3). A dispatched attempt without an observation is not safe to retry:
// the request becomes indeterminate and the attempt is charged its worst-
// case reservation. A request with nothing in flight had no effect: its
// identity is released. Nothing is ever re-dispatched.
func (g *Gateway) recover(ctx context.Context) (int, error) {
	list, err := g.ledger.Unfinished(ctx, g.owner)
	if err != nil || len(list) == 0 {
		return 0, err
	}
	fs := make([]*ledger.Finish, len(list))
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(list); i += workers {
				fs[i] = g.settlement(list[i])
			}
		}()
	}
	wg.Wait()
	return len(fs), g.ledger.Settle(ctx, fs)
}

// settleOne settles a single request whose owner's lease lapsed.
func (g *Gateway) settleOne(ctx context.Context, rec *ledger.Record) {
	evs, err := g.ledger.Events(ctx, rec.RequestID)
	if err == nil {
		err = g.ledger.Settle(ctx, []*ledger.Finish{g.settlement(ledger.Unfinished{Record: rec, Events: evs})})
	}
	if err != nil {
		g.log.Error("settle a lapsed request", "request_id", rec.RequestID, "err", err)
	}
}

// settlement rebuilds an unfinished request's receipt from its log and
// decides its terminal.
func (g *Gateway) settlement(u ledger.Unfinished) *ledger.Finish {
	rec, now := u.Record, g.clock.Now()
	r := &receipt.Receipt{RequestID: rec.RequestID, Tenant: rec.Tenant, Operation: rec.Operation, CreatedAt: rec.CreatedAt,
		RequestSHA256: rec.RequestSHA256, Stream: rec.Stream, RetryOwner: receipt.RetryOwner}
	var pending *dispatchEvent
	var pendingAt time.Time
	seq := int64(0)
	for _, e := range u.Events {
		seq = e.Seq
		switch e.Type {
		case ledger.EvCreated:
			_ = json.Unmarshal(e.Data, r)
			r.Attempts, r.Decisions = nil, r.Decisions[:min(1, len(r.Decisions))]
		case ledger.EvDispatch:
			var d dispatchEvent
			if json.Unmarshal(e.Data, &d) == nil {
				pending, pendingAt = &d, e.At
			}
		case ledger.EvObserved:
			var a receipt.Attempt
			if json.Unmarshal(e.Data, &a) == nil {
				r.Attempts = append(r.Attempts, a)
				pending = nil
			}
		case ledger.EvDecision:
			var d receipt.Decision
			if json.Unmarshal(e.Data, &d) == nil {
				r.Decisions = append(r.Decisions, d)
			}
		}
	}
	f := &ledger.Finish{Identity: rec.Identity, RequestID: rec.RequestID, Generation: rec.Generation, At: now,
		Tenant: rec.Tenant, Takeover: true}
	switch {
	case pending != nil && pending.Ordinal == len(r.Attempts)+1:
		r.Attempts = append(r.Attempts, g.unobserved(r, pending, pendingAt, now))
		r.Decisions = append(r.Decisions, receipt.Decision{AfterAttempt: pending.Ordinal, Action: "stop",
			Terminal: string(gw.TerminalIndeterminate), Reason: string(gw.ReasonIndeterminate)})
		r.Terminal, r.Reason = string(gw.TerminalIndeterminate), string(gw.ReasonIndeterminate)
		f.State = ledger.Indeterminate
	default:
		// Nothing was in flight: no effect to reconcile; free the identity.
		r.Terminal, r.Reason = string(gw.TerminalCancelled), string(gw.ReasonCancelled)
		f.State, f.Release = ledger.FailedNoEffect, true
	}
	r.Totals = r.ComputeTotals()
	body, _ := json.Marshal(r)
	f.Receipt = body
	term, _ := json.Marshal(map[string]string{"terminal": r.Terminal, "reason": r.Reason, "by": "recovery"})
	f.Events = []ledger.Event{{RequestID: rec.RequestID, Seq: seq + 1, Generation: rec.Generation, Type: ledger.EvTerminal, At: now, Data: term}}
	return f
}

// unobserved is the receipt attempt for a dispatch whose outcome was never
// observed: indeterminate, charged its worst case.
func (g *Gateway) unobserved(r *receipt.Receipt, d *dispatchEvent, at, now time.Time) receipt.Attempt {
	a := receipt.Attempt{Ordinal: d.Ordinal, Route: d.Route, Purpose: d.Purpose, RequestSHA256: r.RequestSHA256,
		NotBefore: d.NotBefore, StartedAt: at.UTC(), ObservedAt: now.UTC(), OutcomeClass: string(gw.ClassIndeterminate),
		Kind: string(gw.KindUnknownProviderAcceptance), UsageEstimated: true, ReservedUSD: d.ReserveUSD,
		Breaker: receipt.BreakerState{State: "unknown"},
		Error:   &receipt.AttemptError{Message: "the gateway stopped before this attempt's outcome was observed"}}
	for _, x := range r.Attempts {
		if x.Route == d.Route {
			a.RouteOrdinal++
		}
	}
	a.RouteOrdinal++
	if alias := g.pol.Alias(r.Model); alias != nil {
		if route := alias.Route(d.Route); route != nil {
			a.Provider, a.UpstreamModel, a.Release, a.DataBoundary = route.Provider.ID, route.Model, route.Release, route.Boundary.String()
			out := route.Caps.MaxOutputTokens
			if m := r.Request.MaxOutputTokens; m > 0 && m < out {
				out = m
			}
			a.Usage = gw.Usage{InputTokens: r.Request.EstimatedInputTokens, OutputTokens: out}
			a.CostUSD = route.Price.Cost(a.Usage).USD()
		}
	}
	if a.Provider == "" {
		a.Error.Message += fmt.Sprintf(" (route %q is no longer configured)", d.Route)
	}
	return a
}
