package receipt

import (
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
)

// DriftCode names one kind of disagreement between a receipt and what the
// engine, the policy and the receipt's own digests say. The codes are a
// closed vocabulary; `oncegate verify` prints them.
type DriftCode string

// The drift codes.
const (
	DriftDigest          DriftCode = "digest_mismatch"
	DriftPolicy          DriftCode = "policy_mismatch"
	DriftRetryOwner      DriftCode = "opaque_retry_owner"
	DriftUnknownAlias    DriftCode = "unknown_alias"
	DriftRouteNotAllowed DriftCode = "route_not_allowed"
	DriftContract        DriftCode = "contract_drift"
	DriftBoundary        DriftCode = "boundary_drift"
	DriftLogicalRequest  DriftCode = "logical_request_drift"
	DriftClass           DriftCode = "class_mismatch"
	DriftCost            DriftCode = "cost_mismatch"
	DriftTimeOrder       DriftCode = "time_order"
	DriftRouteOrder      DriftCode = "route_out_of_order" // e.g. a premature fallback
	DriftEarly           DriftCode = "attempt_before_not_before"
	DriftSchedule        DriftCode = "schedule_mismatch"
	DriftJitter          DriftCode = "jitter_out_of_interval"
	DriftJitterReplay    DriftCode = "jitter_not_replayable"
	DriftTerminal        DriftCode = "wrong_terminal"
	DriftDecision        DriftCode = "decision_mismatch"
	DriftTotals          DriftCode = "totals_mismatch"
	// DriftBilledBelowShown is an attempt charged fewer output tokens than
	// the output its client was shown (emitted_tokens).
	DriftBilledBelowShown DriftCode = "billed_below_shown"

	// Attempts after the engine stopped, named by why it stopped.
	DriftNonRetryableRetried  DriftCode = "non_retryable_retried"
	DriftIndeterminateRetried DriftCode = "indeterminate_retried"
	DriftAttemptBudget        DriftCode = "attempt_budget_exceeded"
	DriftRouteBudget          DriftCode = "route_budget_exceeded"
	DriftCostBudget           DriftCode = "cost_budget_exceeded"
	DriftDeadline             DriftCode = "deadline_exceeded"
	DriftRoutesExhausted      DriftCode = "routes_exhausted"
	DriftCircuitOpen          DriftCode = "circuit_open_ignored"
	DriftRetryBudget          DriftCode = "retry_budget_exceeded"
	DriftAfterTerminal        DriftCode = "attempt_after_terminal"
)

// afterStop maps the reason the engine stopped to the drift an attempt
// past that stop is.
var afterStop = map[gw.Reason]DriftCode{
	gw.ReasonNonRetryable:    DriftNonRetryableRetried,
	gw.ReasonIndeterminate:   DriftIndeterminateRetried,
	gw.ReasonAttemptBudget:   DriftAttemptBudget,
	gw.ReasonRouteBudget:     DriftRouteBudget,
	gw.ReasonCostBudget:      DriftCostBudget,
	gw.ReasonDeadline:        DriftDeadline,
	gw.ReasonRoutesExhausted: DriftRoutesExhausted,
	gw.ReasonCircuitOpen:     DriftCircuitOpen,
	gw.ReasonRetryBudget:     DriftRetryBudget,
}

// Drift is one disagreement. Attempt is the attempt ordinal it concerns (0:
// the receipt as a whole).
type Drift struct {
	Code     DriftCode
	Attempt  int
	Expected string
	Found    string
}

func (d Drift) String() string {
	where := "receipt"
	if d.Attempt > 0 {
		where = fmt.Sprintf("attempt %d", d.Attempt)
	}
	return fmt.Sprintf("%s: %s: expected %s, found %s", where, d.Code, d.Expected, d.Found)
}

type verifier struct {
	p      *policy.Policy
	r      *Receipt
	alias  *policy.Alias
	drifts []Drift
}

func (v *verifier) add(code DriftCode, attempt int, expected, found string) {
	v.drifts = append(v.drifts, Drift{Code: code, Attempt: attempt, Expected: expected, Found: found})
}

// Verify checks a receipt against the policy it names and re-runs the
// retry engine over its recorded outcomes (docs/receipts.md). It returns every
// drift found; none means the receipt is exactly what the engine would
// have done.
func Verify(p *policy.Policy, r *Receipt) []Drift {
	v := &verifier{p: p, r: r}
	v.digests()
	v.ownership()
	v.alias = p.Alias(r.Model)
	if v.alias == nil {
		v.add(DriftUnknownAlias, 0, "a model alias of the policy", r.Model)
		return v.drifts
	}
	if r.PolicySHA256 != v.alias.Digest {
		v.add(DriftPolicy, 0, "policy_sha256 "+v.alias.Digest, r.PolicySHA256)
	}
	for i := range r.Attempts {
		v.static(&r.Attempts[i])
	}
	v.replay()
	v.totals()
	return v.drifts
}

func (v *verifier) digests() {
	r := v.r
	if d, err := r.attemptsDigest(); err != nil || d != r.AttemptsSHA256 {
		v.add(DriftDigest, 0, "attempts_sha256 "+d, r.AttemptsSHA256)
	}
	if d, err := r.receiptDigest(); err != nil || d != r.ReceiptSHA256 {
		v.add(DriftDigest, 0, "receipt_sha256 "+d, r.ReceiptSHA256)
	}
}

// ownership checks that the gateway's engine is the only retry owner and
// that no attempt is hidden: ordinals run 1..n and the totals count them.
func (v *verifier) ownership() {
	r := v.r
	if r.RetryOwner != RetryOwner {
		v.add(DriftRetryOwner, 0, "retry_owner "+RetryOwner, fmt.Sprintf("retry_owner %q", r.RetryOwner))
	}
	for i, a := range r.Attempts {
		if a.Ordinal != i+1 {
			v.add(DriftRetryOwner, a.Ordinal, fmt.Sprintf("ordinal %d (no hidden attempts)", i+1), fmt.Sprintf("ordinal %d", a.Ordinal))
		}
	}
}

// static checks one attempt against the policy, independent of order.
func (v *verifier) static(a *Attempt) {
	r, n := v.r, a.Ordinal
	route := v.alias.Route(a.Route)
	if route == nil {
		v.add(DriftRouteNotAllowed, n, "a route of alias "+v.alias.Name, fmt.Sprintf("route %q", a.Route))
		return
	}
	if why, out := r.Request.IneligibleRoutes[a.Route]; out {
		v.add(DriftRouteNotAllowed, n, "no attempt on a route ruled out before dispatch ("+why+")", fmt.Sprintf("route %q", a.Route))
	}
	if a.Provider != route.Provider.ID || a.Release != route.Release || a.UpstreamModel != route.Model {
		v.add(DriftContract, n, fmt.Sprintf("%s/%s/%s", route.Provider.ID, route.Model, route.Release),
			fmt.Sprintf("%s/%s/%s", a.Provider, a.UpstreamModel, a.Release))
	}
	v.boundary(a, route)
	if a.RequestSHA256 != r.RequestSHA256 {
		v.add(DriftLogicalRequest, n, "request_sha256 "+r.RequestSHA256, a.RequestSHA256)
	}
	k := gw.Kind(a.Kind)
	if !k.Valid() || string(k.Class()) != a.OutcomeClass {
		v.add(DriftClass, n, fmt.Sprintf("class %s for kind %s", k.Class(), a.Kind), a.OutcomeClass)
	}
	if want := route.Price.Cost(a.Usage); want != gw.NanoFromUSD(a.CostUSD) {
		v.add(DriftCost, n, fmt.Sprintf("cost_usd %v for the recorded usage", want.USD()), fmt.Sprint(a.CostUSD))
	}
	if a.Usage.OutputTokens < a.EmittedTokens {
		// Billing is never below what the client was shown
		// (docs/receipts.md): a stream cut before the provider's final
		// usage is charged at least the output it relayed.
		v.add(DriftBilledBelowShown, n, fmt.Sprintf("usage.output_tokens ≥ emitted_tokens (%d)", a.EmittedTokens), fmt.Sprint(a.Usage.OutputTokens))
	}
	if a.ObservedAt.Before(a.StartedAt) || (a.FirstByteAt != nil && (a.FirstByteAt.Before(a.StartedAt) || a.ObservedAt.Before(*a.FirstByteAt))) {
		v.add(DriftTimeOrder, n, "started_at ≤ first_byte_at ≤ observed_at", "out of order")
	}
	if a.StartedAt.Before(a.NotBefore) {
		v.add(DriftEarly, n, "started_at ≥ "+ts(a.NotBefore), ts(a.StartedAt))
	}
}

func (v *verifier) boundary(a *Attempt, route *policy.Route) {
	n := a.Ordinal
	if a.DataBoundary != route.Boundary.String() {
		v.add(DriftBoundary, n, "data_boundary "+route.Boundary.String()+" of route "+route.ID, a.DataBoundary)
	}
	limit := v.alias.MaxBoundary
	if b, err := gw.ParseDataBoundary(v.r.Request.MaxDataBoundary); err == nil && b < limit {
		limit = b
	}
	if route.Boundary > limit {
		v.add(DriftBoundary, n, "a route within data boundary "+limit.String(), fmt.Sprintf("route %s at %s", route.ID, route.Boundary))
	}
}

// replay re-runs the engine: every attempt must be the one the previous
// decision scheduled, and the last decision must be the recorded terminal.
// It stops at the first attempt that leaves the engine's path, because
// everything after it would only restate that finding.
func (v *verifier) replay() {
	r, e := v.r, v.alias.Engine
	req := r.EngineRequest()
	expected := retry.Start(e, req, v.admission(0), r.CreatedAt)
	var hist []retry.Attempt
	for i := 0; ; i++ {
		if i == len(r.Attempts) {
			rs := v.recoveryStop()
			if rs == nil || rs.AfterAttempt != i || len(r.Decisions) > i+1 {
				// The engine's decision after the last attempt, even if
				// the gateway died before carrying it out.
				v.decision(i, expected)
			}
			if rs == nil {
				v.terminal(expected)
			}
			return
		}
		a := &r.Attempts[i]
		if !expected.Dispatches() {
			code, ok := afterStop[expected.Reason]
			if !ok {
				code = DriftAfterTerminal
			}
			v.add(code, a.Ordinal, "no attempt after "+expected.String(), "an attempt on "+a.Route)
			return
		}
		v.decision(i, expected)
		if !v.scheduled(a, expected, hist) {
			return
		}
		hist = append(hist, a.Engine())
		if i+1 < len(r.Attempts) && r.Attempts[i+1].Purpose == string(retry.PurposeHedge) {
			if !v.hedge(a, &r.Attempts[i+1], hist[:len(hist)-1], expected) {
				return
			}
			i++
			hist = append(hist, r.Attempts[i].Engine())
		}
		var err error
		if expected, err = retry.Decide(e, req, hist, v.admission(i+1)); err != nil {
			v.add(DriftAfterTerminal, a.Ordinal, "no attempt after a terminal", err.Error())
			return
		}
	}
}

// hedge checks a hedge h of attempt p against the engine (docs/overload.md): it
// is the hedge the engine allows when it was decided, on the route it
// picks, decided no sooner than hedge.after into p and before p's first
// byte; and exactly one of the pair lost, unless both failed on their own.
// hist is what came before p; d is p's decision.
func (v *verifier) hedge(p, h *Attempt, hist []retry.Attempt, d retry.Decision) bool {
	e, n := v.alias.Engine, h.Ordinal
	want, ok := retry.Hedge(e, v.r.EngineRequest(), hist, d, v.admission(n-1), h.NotBefore)
	if !ok {
		v.add(DriftRouteOrder, n, "no hedge: the engine allows none here", "a hedge to "+h.Route)
		return false
	}
	v.decision(n-1, want)
	if h.Route != want.Route {
		v.add(DriftRouteOrder, n, "hedge to "+want.Route, "hedge to "+h.Route)
		return false
	}
	if earliest := p.StartedAt.Add(e.HedgeAfter); h.NotBefore.Before(earliest) {
		v.add(DriftEarly, n, "a hedge no sooner than "+ts(earliest)+" (hedge.after into attempt "+fmt.Sprint(p.Ordinal)+")", ts(h.NotBefore))
	}
	if p.FirstByteAt != nil && p.FirstByteAt.Before(h.NotBefore) {
		v.add(DriftSchedule, n, "a hedge only while attempt "+fmt.Sprint(p.Ordinal)+" has no first byte", "first byte at "+ts(*p.FirstByteAt))
	}
	if p.Cause == string(gw.CauseHedgeLost) && h.Cause == string(gw.CauseHedgeLost) {
		v.add(DriftDecision, n, "one winner of the hedge race", "both attempts lost")
	}
	return true
}

// recoveryStop returns the stop recovery recorded when the request's
// gateway died (docs/receipts.md), which verify accepts in place of the
// engine's going on: recovery never dispatches, so the engine's next
// decision was never carried out. It must be the last decision, a stop
// after the last attempt, ending the request indeterminate or cancelled as
// the receipt's terminal says. nil if recovery took no decision.
func (v *verifier) recoveryStop() *Decision {
	r := v.r
	var rs *Decision
	for i := range r.Decisions {
		d := &r.Decisions[i]
		if d.By == "" {
			continue
		}
		rs = d
		switch {
		case d.By != ByRecovery || i != len(r.Decisions)-1 || d.Action != string(retry.ActionStop) || d.AfterAttempt != len(r.Attempts):
			v.add(DriftDecision, d.AfterAttempt, "at most one stop by recovery, the last decision, after the last attempt",
				fmt.Sprintf("%s after attempt %d by %s", d.Action, d.AfterAttempt, d.By))
		case d.Terminal != string(gw.TerminalIndeterminate) && d.Terminal != string(gw.TerminalCancelled):
			v.add(DriftDecision, d.AfterAttempt, "recovery ends a request indeterminate or cancelled", "terminal "+d.Terminal)
		case d.Terminal != r.Terminal || d.Reason != r.Reason:
			v.add(DriftTerminal, 0, fmt.Sprintf("terminal %s/%s (recovery's stop)", d.Terminal, d.Reason), fmt.Sprintf("%s/%s", r.Terminal, r.Reason))
		}
	}
	return rs
}

// terminal compares the receipt's terminal with the engine's last decision.
func (v *verifier) terminal(expected retry.Decision) {
	r := v.r
	switch {
	case expected.Dispatches() && r.Terminal == string(gw.TerminalCancelled):
		// The caller left while the next attempt waited: a valid end.
	case expected.Dispatches() && r.Terminal == string(gw.TerminalDeadline) && r.Reason == string(gw.ReasonDeadline):
		// The deadline passed before the next attempt could be sent.
	case expected.Dispatches():
		v.add(DriftTerminal, 0, expected.String(), fmt.Sprintf("terminal %s/%s", r.Terminal, r.Reason))
	case string(expected.Terminal) != r.Terminal || string(expected.Reason) != r.Reason:
		v.add(DriftTerminal, 0, fmt.Sprintf("terminal %s/%s", expected.Terminal, expected.Reason), fmt.Sprintf("%s/%s", r.Terminal, r.Reason))
	}
}

// scheduled checks attempt a against the decision that should have made it
// and reports whether the replay can go on.
func (v *verifier) scheduled(a *Attempt, d retry.Decision, hist []retry.Attempt) bool {
	n := a.Ordinal
	if a.Route != d.Route || a.Purpose != string(d.Purpose()) {
		v.add(DriftRouteOrder, n, fmt.Sprintf("%s to %s", d.Action, d.Route), fmt.Sprintf("%s to %s", a.Purpose, a.Route))
		return false
	}
	if len(hist) > 0 {
		v.jitter(a, hist)
	}
	if !a.NotBefore.Equal(d.NotBefore) && a.JitterMS == d.JitterMS {
		v.add(DriftSchedule, n, "not_before "+ts(d.NotBefore), ts(a.NotBefore))
	}
	if a.StartedAt.Before(d.NotBefore) && !a.StartedAt.Before(a.NotBefore) {
		v.add(DriftEarly, n, "started_at ≥ "+ts(d.NotBefore), ts(a.StartedAt))
	}
	return true
}

// jitter checks the recorded jitter lies in its interval and is the value
// the seeded PRNG replays.
func (v *verifier) jitter(a *Attempt, hist []retry.Attempt) {
	e, n := v.alias.Engine, a.Ordinal
	prev := hist[len(hist)-1]
	var exp time.Duration
	switch retry.Purpose(a.Purpose) {
	case retry.PurposeRetry, retry.PurposeRestart:
		if prev.Route == a.Route {
			exp = retry.Backoff(e.BaseDelay, e.MaxDelay, routeCount(hist, a.Route)+1)
		} else {
			exp = e.BaseDelay
		}
	case retry.PurposeFallback:
		exp = e.BaseDelay
	default:
		return // resumes and hedges do not wait
	}
	lo, hi := retry.JitterInterval(e.Jitter, exp)
	if a.JitterMS < lo || a.JitterMS > hi {
		v.add(DriftJitter, n, fmt.Sprintf("jitter_ms in [%d, %d]", lo, hi), fmt.Sprint(a.JitterMS))
		return
	}
	if _, want := retry.Jittered(e.Jitter, exp, e.Digest, v.r.RequestID, n); want != a.JitterMS {
		v.add(DriftJitterReplay, n, fmt.Sprintf("jitter_ms %d from the seeded PRNG", want), fmt.Sprint(a.JitterMS))
	}
}

// decision compares the recorded decision taken after attempt i (0: the
// start) with the replayed one.
func (v *verifier) decision(i int, d retry.Decision) {
	if i >= len(v.r.Decisions) {
		v.add(DriftDecision, i, "a recorded decision: "+d.String(), "none")
		return
	}
	rd := v.r.Decisions[i]
	if rd.AfterAttempt != i || rd.Action != string(d.Action) || rd.Route != d.Route || rd.Reason != string(d.Reason) {
		v.add(DriftDecision, i, d.String(), fmt.Sprintf("%s{route=%s reason=%s}", rd.Action, rd.Route, rd.Reason))
	}
}

func (v *verifier) admission(i int) retry.Admission {
	if i < len(v.r.Decisions) {
		return v.r.Decisions[i].Admission()
	}
	return retry.Admission{}
}

func (v *verifier) totals() {
	want := v.r.ComputeTotals()
	got := v.r.Totals
	if got.Attempts != want.Attempts || got.BillableTokens != want.BillableTokens ||
		gw.NanoFromUSD(got.CostUSD) != gw.NanoFromUSD(want.CostUSD) || fmt.Sprint(got.Providers) != fmt.Sprint(want.Providers) {
		v.add(DriftTotals, 0, fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", got))
	}
}

func routeCount(hist []retry.Attempt, route string) int {
	n := 0
	for _, a := range hist {
		if a.Route == route {
			n++
		}
	}
	return n
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
