// Package recovery settles the requests whose owners are gone
// (docs/identity.md, "Recovery"): a previous process's, another replica's
// that died, or a call whose store was unreachable. Nothing is ever
// re-dispatched; each request's receipt is rebuilt from its event log.
package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// Recovery settles requests whose owners' leases lapsed.
type Recovery struct {
	// Store is the ledger of the requests.
	Store ledger.Store
	// Clock tells the time a lease is compared with.
	Clock clock.Clock
	// Log receives what could not be settled or read.
	Log *slog.Logger
	// Policy is the configuration in force: the routes' prices and
	// limits an unobserved attempt is charged by.
	Policy func() *policy.Policy
	// Seen, when set, is what clients on other gateways were shown of
	// requests whose owners stopped (replicas only).
	Seen func(ctx context.Context, requestIDs []string) (map[string]coord.Seen, error)
	// Charged, when set, is told that recovery charged tenants: the
	// tenant limits read the day's spend again.
	Charged func(ctx context.Context) error
}

// SettleLapsed settles every request whose owner's lease lapsed — a previous
// process's, another replica's that died, or a call of this one whose
// store was unreachable (docs/identity.md, "Recovery"). A dispatched
// attempt without an observation is not safe to retry, so its request
// becomes indeterminate and the attempt is charged its worst case; a
// request with nothing in flight had no effect and releases its identity.
// Nothing is ever re-dispatched. Each request's receipt, a pure function
// of its event log, and its charge are written in the same commit as its
// settlement: the day's spend never misses a settled request, whoever
// reads it (a restarted Redis seeding its day reads it at any moment).
func (rv *Recovery) SettleLapsed(ctx context.Context) (int, error) {
	now := rv.Clock.Now()
	lapsed, err := rv.Store.Lapsed(ctx, now)
	if err != nil || len(lapsed) == 0 {
		return 0, err
	}
	ids := make([]string, len(lapsed))
	for i, u := range lapsed {
		ids[i] = u.Record.RequestID
	}
	seen := rv.seen(ctx, ids)
	fs := make([]*ledger.Finish, len(lapsed))
	for i, u := range lapsed {
		fs[i] = rv.Settlement(u.Record, u.Events, now, seen[u.Record.RequestID])
	}
	settled, err := rv.Store.Settle(ctx, fs)
	if err != nil {
		return 0, err
	}
	if len(settled) > 0 {
		// The tenant limits learn the charges recovery just made.
		if rv.Charged != nil {
			if err := rv.Charged(ctx); err != nil {
				rv.Log.Error("read the day's spend after recovery", "err", err)
			}
		}
	}
	return len(settled), nil
}

// ShownOutput reports whether an observed attempt among evs had visible
// output.
func ShownOutput(evs []ledger.Event) bool {
	for _, e := range evs {
		var a struct {
			Visible bool `json:"visible_output"`
		}
		if e.Type == ledger.EvObserved && json.Unmarshal(e.Data, &a) == nil && a.Visible {
			return true
		}
	}
	return false
}

// Receipt rebuilds a recovered request's receipt from its events
// and stores it — for a request an older version settled without its
// receipt. tenant, when set, must own it.
func (rv *Recovery) Receipt(ctx context.Context, tenant, id string) (*receipt.Receipt, error) {
	evs, err := rv.Store.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	r, ok := rv.rebuild(evs)
	if !ok || (tenant != "" && r.Tenant != tenant) {
		return nil, ledger.ErrNotFound
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return r, rv.Store.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: r.Tenant, RequestID: id, Body: body,
		Charge: int64(gw.NanoFromUSD(r.Totals.CostUSD)), At: rv.Clock.Now(), Key: r.KeyID})
}

// SettleOne settles a single request whose owner's lease lapsed while this
// gateway runs (another replica died): the same outcome as recovery.
func (rv *Recovery) SettleOne(ctx context.Context, rec *ledger.Record) {
	evs, err := rv.Store.Events(ctx, rec.RequestID)
	if err == nil {
		seen := rv.seen(ctx, []string{rec.RequestID})[rec.RequestID]
		_, err = rv.Store.Settle(ctx, []*ledger.Finish{rv.Settlement(rec, evs, rv.Clock.Now(), seen)})
	}
	if err != nil {
		rv.Log.Error("settle a lapsed request", "request_id", rec.RequestID, "err", err)
	}
}

// seen is what clients on other gateways were shown of requests whose
// owners stopped (none without replicas, or while Redis cannot say).
func (rv *Recovery) seen(ctx context.Context, ids []string) map[string]coord.Seen {
	if rv.Seen == nil {
		return nil
	}
	seen, err := rv.Seen(ctx, ids)
	if err != nil {
		rv.Log.Warn("read what joiners were shown of requests recovery settles", "err", err)
	}
	return seen
}

// Settlement is how recovery finishes a request whose owner is gone, from
// its record and events, and what joiners on other gateways were shown of
// it: indeterminate if an attempt was in flight (its generation bumped,
// so the old owner's late writes are fenced off), released otherwise;
// with its rebuilt receipt and what it charges.
func (rv *Recovery) Settlement(rec *ledger.Record, evs []ledger.Event, now time.Time, seen coord.Seen) *ledger.Finish {
	// Output a client saw keeps the key too: it is never released for a
	// second generation (docs/identity.md).
	pending := ledger.InFlight(evs) || ShownOutput(evs)
	terminal, reason, state := gw.TerminalCancelled, gw.ReasonCancelled, ledger.FailedNoEffect
	if pending {
		terminal, reason, state = gw.TerminalIndeterminate, gw.ReasonIndeterminate, ledger.Indeterminate
	}
	data, _ := json.Marshal(map[string]string{"terminal": string(terminal), "reason": string(reason), "by": "recovery"})
	seq := int64(len(evs))
	if n := len(evs); n > 0 {
		seq = max(seq, evs[n-1].Seq)
	}
	term := ledger.Event{RequestID: rec.RequestID, Seq: seq + 1, Generation: rec.Generation, Type: ledger.EvTerminal, At: now, Data: data}
	r, _ := rv.rebuild(append(evs, term))
	var body []byte
	var charge int64
	var key string
	if r != nil && pending && seen.Joined > 0 {
		r.Dedup.Joined += seen.Joined
		if n := len(r.Attempts); n > 0 {
			if a := &r.Attempts[n-1]; a.OutcomeClass == string(gw.ClassIndeterminate) && seen.Emitted > a.EmittedTokens {
				// The attempt in flight when its gateway died had
				// output: a joiner elsewhere was shown it.
				a.VisibleOutput, a.EmittedTokens = true, seen.Emitted
				rv.chargeShown(r, a)
			}
		}
	}
	if r != nil {
		body, _ = json.Marshal(r)
		charge, key = int64(gw.NanoFromUSD(r.Totals.CostUSD)), r.KeyID
	}
	return &ledger.Finish{Identity: rec.Identity, RequestID: rec.RequestID, Generation: rec.Generation, State: state, At: now,
		Events: []ledger.Event{term}, Receipt: body, Tenant: rec.Tenant, Charge: charge, Key: key, Takeover: true, Release: !pending}
}

// chargeShown raises an unobserved attempt's charge, its worst case, to
// the output a client was shown of it if that is more: a receipt never
// bills below what was shown (docs/streaming.md).
func (rv *Recovery) chargeShown(r *receipt.Receipt, a *receipt.Attempt) {
	if a.Usage.OutputTokens >= a.EmittedTokens {
		return
	}
	a.Usage.OutputTokens, a.UsageEstimated = a.EmittedTokens, true
	if alias := rv.Policy().Alias(r.Model); alias != nil {
		if route := alias.Route(a.Route); route != nil {
			a.CostUSD = route.Price.Cost(a.Usage).USD()
		}
	}
	r.Totals = r.ComputeTotals()
}

// rebuild reconstructs the receipt of a request recovery settled, from its
// event log; ok is false for a request that was not settled by recovery.
func (rv *Recovery) rebuild(evs []ledger.Event) (*receipt.Receipt, bool) {
	r := &receipt.Receipt{RetryOwner: receipt.RetryOwner}
	type dispatched struct {
		d  ledger.Dispatch
		at time.Time
	}
	var pending []dispatched // in dispatch order; a hedge makes two at once
	var term struct{ Terminal, Reason, By string }
	for _, e := range evs {
		switch e.Type {
		case ledger.EvCreated:
			_ = json.Unmarshal(e.Data, r)
			r.Attempts, r.Decisions = nil, r.Decisions[:min(1, len(r.Decisions))]
		case ledger.EvDispatch:
			var d ledger.Dispatch
			if json.Unmarshal(e.Data, &d) == nil {
				pending = append(pending, dispatched{d, e.At})
			}
		case ledger.EvObserved:
			var a receipt.Attempt
			if json.Unmarshal(e.Data, &a) == nil && a.Route != "" { // not a reference to a receipt
				r.Attempts = append(r.Attempts, a)
			}
		case ledger.EvDecision:
			var d receipt.Decision
			if json.Unmarshal(e.Data, &d) == nil && d.Action != "" {
				r.Decisions = append(r.Decisions, d)
			}
		case ledger.EvTerminal:
			_ = json.Unmarshal(e.Data, &term)
		}
	}
	if term.By != "recovery" || r.RequestID == "" {
		return nil, false
	}
	at := evs[len(evs)-1].At
	for _, p := range pending {
		if p.d.Ordinal == len(r.Attempts)+1 {
			r.Attempts = append(r.Attempts, rv.unobserved(r, &p.d, p.at, at))
		}
	}
	if term.Terminal == string(gw.TerminalIndeterminate) {
		// Recovery's own stop: the engine might have gone on (resumed a
		// broken stream, retried), but recovery never dispatches.
		r.Decisions = append(r.Decisions, receipt.Decision{AfterAttempt: len(r.Attempts), Action: "stop",
			Terminal: string(gw.TerminalIndeterminate), Reason: string(gw.ReasonIndeterminate), By: receipt.ByRecovery})
	}
	r.Terminal, r.Reason = term.Terminal, term.Reason
	if n := len(r.Decisions); term.Terminal != string(gw.TerminalIndeterminate) && n > 0 && r.Decisions[n-1].AfterAttempt == len(r.Attempts) &&
		r.Decisions[n-1].Action == string(retry.ActionStop) && r.Decisions[n-1].Terminal != "" {
		// The engine had already stopped (a request refused before any
		// attempt, its start decision durable with its claim) when its
		// owner died: that stop is how the request ended, not a
		// cancellation.
		r.Terminal, r.Reason = r.Decisions[n-1].Terminal, r.Decisions[n-1].Reason
	}
	r.Totals = r.ComputeTotals()
	return r, true
}

// scheduledJitter is the jitter the decision that scheduled attempt n
// drew: the attempt carries it, as an observed one does.
func scheduledJitter(ds []receipt.Decision, n int) int64 {
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].AfterAttempt == n-1 {
			return ds[i].JitterMS
		}
	}
	return 0
}

// unobserved is the receipt attempt for a dispatch whose outcome was never
// observed: indeterminate, charged its worst case.
func (rv *Recovery) unobserved(r *receipt.Receipt, d *ledger.Dispatch, at, now time.Time) receipt.Attempt {
	a := receipt.Attempt{Ordinal: d.Ordinal, Route: d.Route, Purpose: d.Purpose, RequestSHA256: r.RequestSHA256,
		NotBefore: d.NotBefore, StartedAt: at.UTC(), ObservedAt: now.UTC(), OutcomeClass: string(gw.ClassIndeterminate),
		JitterMS: scheduledJitter(r.Decisions, d.Ordinal),
		Kind:     string(gw.KindUnknownProviderAcceptance), UsageEstimated: true, ReservedUSD: d.ReserveUSD,
		Breaker: receipt.BreakerState{State: "unknown"},
		Error:   &receipt.AttemptError{Message: "the gateway stopped before this attempt's outcome was observed"}}
	for _, x := range r.Attempts {
		if x.Route == d.Route {
			a.RouteOrdinal++
		}
	}
	a.RouteOrdinal++
	if alias := rv.Policy().Alias(r.Model); alias != nil {
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
