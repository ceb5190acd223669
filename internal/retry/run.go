package retry

import (
	"fmt"
	"time"
)

// Run tracks one logical request through the engine: it keeps the attempts
// and the last decision, checks that every observed attempt is the one that
// was decided, and refuses anything after a terminal. It holds no clock and
// does no I/O. A Run is not safe for concurrent use.
type Run struct {
	p        *Policy
	req      *Request
	attempts []Attempt
	last     Decision
	hedge    *Decision // a hedge of the attempt in flight, if one was decided
	started  bool
	startAt  time.Time
}

// NewRun begins tracking a logical request under p.
func NewRun(p *Policy, req *Request) *Run { return &Run{p: p, req: req} }

// Start decides the first attempt at now.
func (r *Run) Start(adm Admission, now time.Time) Decision {
	r.started, r.startAt = true, now
	r.last = Start(r.p, r.req, adm, now)
	return r.last
}

// Redecide takes the last decision again under a new admission. The caller
// does so when it could not acquire what the decision needed — a half-open
// breaker's last probe, the fleet's last retry, the tenant's allowance —
// because a concurrent request took it between the snapshot and the
// dispatch. It must come before the decided attempt is observed.
func (r *Run) Redecide(adm Admission) (Decision, error) {
	if !r.started || !r.last.Dispatches() || r.hedge != nil {
		return Decision{}, fmt.Errorf("%w: nothing to redecide after %s", ErrAfterTerminal, r.last)
	}
	if len(r.attempts) == 0 {
		r.last = Start(r.p, r.req, adm, r.startAt)
	} else {
		r.last = decide(r.p, r.req, r.attempts, adm)
	}
	return r.last, nil
}

// Hedge decides, at at, whether to hedge the attempt the last decision
// dispatched (see the package function Hedge). Once hedged, the pair is
// observed together with ObservePair.
func (r *Run) Hedge(adm Admission, at time.Time) (Decision, bool) {
	if !r.started || !r.last.Dispatches() || r.hedge != nil {
		return Decision{}, false
	}
	d, ok := Hedge(r.p, r.req, r.attempts, r.last, adm, at)
	if ok {
		r.hedge = &d
	}
	return d, ok
}

// CancelHedge forgets a hedge decided but not dispatched (the caller could
// not acquire its route).
func (r *Run) CancelHedge() { r.hedge = nil }

// Observe records an attempt's outcome and decides what follows. The
// attempt must be the one the previous decision scheduled: its route and
// ordinal, not started before its not_before.
func (r *Run) Observe(a Attempt, adm Admission) (Decision, error) {
	if r.hedge != nil {
		return Decision{}, fmt.Errorf("%w: attempt %d was hedged; observe the pair", ErrUnexpectedAttempt, a.Ordinal)
	}
	if err := r.check(a, r.last, len(r.attempts)+1); err != nil {
		return Decision{}, err
	}
	r.attempts = append(r.attempts, a)
	r.last = decide(r.p, r.req, r.attempts, adm)
	return r.last, nil
}

// ObservePair records a hedged attempt and its hedge, once both are over,
// and decides what follows.
func (r *Run) ObservePair(primary, hedge Attempt, adm Admission) (Decision, error) {
	if r.hedge == nil {
		return Decision{}, fmt.Errorf("%w: attempt %d has no hedge", ErrUnexpectedAttempt, primary.Ordinal)
	}
	n := len(r.attempts) + 1
	if err := r.check(primary, r.last, n); err != nil {
		return Decision{}, err
	}
	if err := r.check(hedge, *r.hedge, n+1); err != nil {
		return Decision{}, err
	}
	if hedge.Purpose != PurposeHedge {
		return Decision{}, fmt.Errorf("%w: attempt %d has purpose %s, want hedge", ErrUnexpectedAttempt, hedge.Ordinal, hedge.Purpose)
	}
	r.attempts = append(r.attempts, primary, hedge)
	r.hedge = nil
	r.last = decide(r.p, r.req, r.attempts, adm)
	return r.last, nil
}

func (r *Run) check(a Attempt, d Decision, ordinal int) error {
	if !r.started || !d.Dispatches() {
		return fmt.Errorf("%w: attempt %d after %s", ErrAfterTerminal, a.Ordinal, d)
	}
	switch {
	case a.Route != d.Route:
		return fmt.Errorf("%w: attempt %d went to route %s, decided %s", ErrUnexpectedAttempt, a.Ordinal, a.Route, d.Route)
	case a.Ordinal != ordinal:
		return fmt.Errorf("%w: ordinal %d, want %d", ErrUnexpectedAttempt, a.Ordinal, ordinal)
	case a.StartedAt.Before(d.NotBefore):
		return fmt.Errorf("%w: attempt %d started %v before its not_before", ErrUnexpectedAttempt, a.Ordinal, d.NotBefore.Sub(a.StartedAt))
	}
	return nil
}

// Attempts returns the attempts observed so far. The slice must not be
// modified.
func (r *Run) Attempts() []Attempt { return r.attempts }

// Last is the most recent decision.
func (r *Run) Last() Decision { return r.last }

// Done reports whether a terminal decision was made.
func (r *Run) Done() bool { return r.started && !r.last.Dispatches() }
