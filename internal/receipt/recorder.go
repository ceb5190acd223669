package receipt

import (
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
)

// Observation is what the dispatcher saw of one attempt; the Recorder
// fills in everything the route and the decision determine.
type Observation struct {
	StartedAt        time.Time
	FirstByteAt      *time.Time
	ObservedAt       time.Time
	Kind             gw.Kind
	Cause            gw.Cause
	HTTPStatus       int
	RetryAfter       *time.Duration
	VisibleOutput    bool
	EmittedTokens    int64
	InToolCall       bool
	ProtocolWarnings int
	Usage            gw.Usage
	UsageEstimated   bool
	Breaker          BreakerState
	Error            *AttemptError
	// Reconciled is what a stateful route said of an attempt whose
	// outcome was ambiguous: found, absent (see Attempt.Reconciled).
	Reconciled     string
	Orphans        int
	OrphansCostUSD float64
	DroppedFields  []string
}

// Recorder drives the retry engine for one logical request and writes its
// receipt as it goes, so the receipt and the engine cannot disagree. It is
// not safe for concurrent use.
type Recorder struct {
	R     *Receipt
	alias *policy.Alias
	run   *retry.Run
	req   *retry.Request
}

// NewRecorder starts a receipt from its header fields (request id, tenant,
// operation, model, digests, created_at, deadline, facts). It fills
// policy_sha256 and retry_owner.
func NewRecorder(alias *policy.Alias, header Receipt) *Recorder {
	r := header
	r.PolicySHA256 = alias.Digest
	r.RetryOwner = RetryOwner
	r.CreatedAt, r.Deadline = r.CreatedAt.UTC(), r.Deadline.UTC()
	rc := &Recorder{R: &r, alias: alias}
	rc.req = r.EngineRequest()
	rc.run = retry.NewRun(alias.Engine, rc.req)
	return rc
}

// Request is the engine's view of the request.
func (rc *Recorder) Request() *retry.Request { return rc.req }

// Start takes the first decision at now and records it.
func (rc *Recorder) Start(adm retry.Admission, now time.Time) retry.Decision {
	d := rc.run.Start(adm, now)
	rc.R.Decisions = append(rc.R.Decisions, NewDecision(0, d, adm))
	rc.terminal(d)
	return d
}

// Observe records the attempt the last decision scheduled, with what the
// dispatcher observed, and takes and records the next decision.
func (rc *Recorder) Observe(o Observation, adm retry.Admission) (retry.Decision, error) {
	prev := rc.run.Last()
	route := rc.alias.Route(prev.Route)
	if route == nil {
		return retry.Decision{}, fmt.Errorf("%w: route %q is not in alias %s", retry.ErrUnexpectedAttempt, prev.Route, rc.alias.Name)
	}
	a := rc.attempt(prev, route, o)
	d, err := rc.run.Observe(a.Engine(), adm)
	if err != nil {
		return retry.Decision{}, err
	}
	rc.R.Attempts = append(rc.R.Attempts, a)
	rc.R.Decisions = append(rc.R.Decisions, NewDecision(a.Ordinal, d, adm))
	rc.terminal(d)
	return d, nil
}

// Redecide takes the last decision again under a tighter admission (see
// retry.Run.Redecide) and records it in place of the one it replaces.
func (rc *Recorder) Redecide(adm retry.Admission) (retry.Decision, error) {
	d, err := rc.run.Redecide(adm)
	if err != nil {
		return retry.Decision{}, err
	}
	rc.R.Decisions[len(rc.R.Decisions)-1] = NewDecision(len(rc.R.Attempts), d, adm)
	rc.terminal(d)
	return d, nil
}

// Hedge decides at at whether to hedge the attempt in flight and records
// the hedge (after_attempt: the hedged attempt's ordinal).
func (rc *Recorder) Hedge(adm retry.Admission, at time.Time) (retry.Decision, bool) {
	d, ok := rc.run.Hedge(adm, at)
	if ok {
		rc.R.Decisions = append(rc.R.Decisions, NewDecision(len(rc.R.Attempts)+1, d, adm))
	}
	return d, ok
}

// CancelHedge forgets a recorded hedge that was never dispatched.
func (rc *Recorder) CancelHedge() {
	rc.run.CancelHedge()
	rc.R.Decisions = rc.R.Decisions[:len(rc.R.Decisions)-1]
}

// ObservePair records a hedged attempt and its hedge, with what the
// dispatcher observed of each, and takes and records the next decision.
func (rc *Recorder) ObservePair(primary, hedge Observation, hedgeDecision retry.Decision, adm retry.Admission) (retry.Decision, error) {
	prev := rc.run.Last()
	pr, hr := rc.alias.Route(prev.Route), rc.alias.Route(hedgeDecision.Route)
	if pr == nil || hr == nil {
		return retry.Decision{}, fmt.Errorf("%w: routes %q/%q are not in alias %s", retry.ErrUnexpectedAttempt, prev.Route, hedgeDecision.Route, rc.alias.Name)
	}
	pa := rc.attempt(prev, pr, primary)
	rc.R.Attempts = append(rc.R.Attempts, pa)
	ha := rc.attempt(hedgeDecision, hr, hedge)
	rc.R.Attempts = rc.R.Attempts[:len(rc.R.Attempts)-1]
	d, err := rc.run.ObservePair(pa.Engine(), ha.Engine(), adm)
	if err != nil {
		return retry.Decision{}, err
	}
	rc.R.Attempts = append(rc.R.Attempts, pa, ha)
	rc.R.Decisions = append(rc.R.Decisions, NewDecision(ha.Ordinal, d, adm))
	rc.terminal(d)
	return d, nil
}

// attempt records an observed attempt. Its first byte and observation
// are placed after its start by how long they came after it, measured on
// the monotonic clock when the observation's times carry its reading: the
// wall clock may step back or forward while an attempt runs (NTP), and a
// receipt's times keep their order whatever it does (the chaos soak saw
// one attempt in 57,000 with a first byte "before" its start).
func (rc *Recorder) attempt(prev retry.Decision, route *policy.Route, o Observation) Attempt {
	n := len(rc.R.Attempts) + 1
	routeN := 1
	for _, x := range rc.R.Attempts {
		if x.Route == route.ID {
			routeN++
		}
	}
	a := Attempt{Ordinal: n, Route: route.ID, RouteOrdinal: routeN, Provider: route.Provider.ID,
		UpstreamModel: route.Model, Release: route.Release, DataBoundary: route.Boundary.String(),
		Purpose: string(prev.Purpose()), RequestSHA256: rc.R.RequestSHA256,
		NotBefore: prev.NotBefore.UTC(), StartedAt: o.StartedAt.UTC(), ObservedAt: o.StartedAt.UTC().Add(max(0, o.ObservedAt.Sub(o.StartedAt))),
		JitterMS: prev.JitterMS, OutcomeClass: string(o.Kind.Class()), Kind: string(o.Kind), Cause: string(o.Cause),
		HTTPStatus: o.HTTPStatus, VisibleOutput: o.VisibleOutput, EmittedTokens: o.EmittedTokens,
		InToolCall: o.InToolCall, ProtocolWarnings: o.ProtocolWarnings, Usage: o.Usage,
		UsageEstimated: o.UsageEstimated, CostUSD: route.Price.Cost(o.Usage).USD(),
		ReservedUSD: prev.Reserve.USD(), Breaker: o.Breaker, Error: o.Error, Reconciled: o.Reconciled, Orphans: o.Orphans,
		OrphansCostUSD: o.OrphansCostUSD, DroppedFields: o.DroppedFields}
	if o.FirstByteAt != nil {
		fb := o.StartedAt.UTC().Add(min(max(0, o.FirstByteAt.Sub(o.StartedAt)), a.ObservedAt.Sub(a.StartedAt)))
		a.FirstByteAt = &fb
	}
	if o.RetryAfter != nil {
		// Whole milliseconds, rounded up, so the engine and the receipt
		// use the same value.
		ms := int64((*o.RetryAfter + time.Millisecond - 1) / time.Millisecond)
		a.RetryAfterMS = &ms
	}
	return a
}

// HintFor rounds a Retry-After hint the way the Recorder records it.
func HintFor(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// Cancel ends the request as cancelled (the caller left while an attempt
// waited for its not_before).
func (rc *Recorder) Cancel() {
	if rc.R.Terminal == "" {
		rc.R.Terminal, rc.R.Reason = string(gw.TerminalCancelled), string(gw.ReasonCancelled)
	}
}

// Expire ends the request at its deadline: the attempt the last decision
// scheduled could not be sent before the deadline passed (the decision
// was taken in time; the dispatch, after a durable commit, was not).
func (rc *Recorder) Expire() {
	if rc.R.Terminal == "" {
		rc.R.Terminal, rc.R.Reason = string(gw.TerminalDeadline), string(gw.ReasonDeadline)
	}
}

func (rc *Recorder) terminal(d retry.Decision) {
	if !d.Dispatches() {
		rc.R.Terminal, rc.R.Reason = string(d.Terminal), string(d.Reason)
	}
}

// Last is the most recent decision.
func (rc *Recorder) Last() retry.Decision { return rc.run.Last() }

// Seal finalises totals and digests.
func (rc *Recorder) Seal() error { return rc.R.Seal() }
