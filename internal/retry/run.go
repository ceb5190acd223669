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
	started  bool
}

// NewRun begins tracking a logical request under p.
func NewRun(p *Policy, req *Request) *Run { return &Run{p: p, req: req} }

// Start decides the first attempt at now.
func (r *Run) Start(adm Admission, now time.Time) Decision {
	r.started = true
	r.last = Start(r.p, r.req, adm, now)
	return r.last
}

// Observe records an attempt's outcome and decides what follows. The
// attempt must be the one the previous decision scheduled: its route and
// ordinal, not started before its not_before.
func (r *Run) Observe(a Attempt, adm Admission) (Decision, error) {
	if !r.started || !r.last.Dispatches() {
		return Decision{}, fmt.Errorf("%w: attempt %d after %s", ErrAfterTerminal, a.Ordinal, r.last)
	}
	switch {
	case a.Route != r.last.Route:
		return Decision{}, fmt.Errorf("%w: attempt %d went to route %s, decided %s", ErrUnexpectedAttempt, a.Ordinal, a.Route, r.last.Route)
	case a.Ordinal != len(r.attempts)+1:
		return Decision{}, fmt.Errorf("%w: ordinal %d, want %d", ErrUnexpectedAttempt, a.Ordinal, len(r.attempts)+1)
	case a.StartedAt.Before(r.last.NotBefore):
		return Decision{}, fmt.Errorf("%w: attempt %d started %v before its not_before", ErrUnexpectedAttempt, a.Ordinal, r.last.NotBefore.Sub(a.StartedAt))
	}
	r.attempts = append(r.attempts, a)
	r.last = decide(r.p, r.req, r.attempts, adm)
	return r.last, nil
}

// Attempts returns the attempts observed so far. The slice must not be
// modified.
func (r *Run) Attempts() []Attempt { return r.attempts }

// Last is the most recent decision.
func (r *Run) Last() Decision { return r.last }

// Done reports whether a terminal decision was made.
func (r *Run) Done() bool { return r.started && !r.last.Dispatches() }
