// Package breaker holds oncegate's fleet-level overload protection (
// docs/overload.md): a circuit breaker per route and the fleet retry budget. Both
// take an injected clock and keep their counts over rolling windows; both
// are safe for concurrent use. They hold state for one process; the
// gateway reaches them through small interfaces so that a replicated
// deployment can keep the same state elsewhere.
package breaker

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

// State is a breaker's state.
type State int

// The states. Their numbers are the value of oncegate_breaker_state.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Outcome is what an admitted attempt told the breaker about its route.
type Outcome int

// The outcomes. Ignore is for attempts that say nothing about the route's
// health (the caller left, a hedge lost, the request itself was bad).
const (
	Success Outcome = iota
	Failure
	Ignore
)

// Config configures breakers (docs/overload.md).
type Config struct {
	// FailureRatio opens a closed breaker when, over Window, at least
	// MinRequests attempts completed and this share of them failed.
	FailureRatio float64
	MinRequests  int
	Window       time.Duration
	// OpenFor is how long an open breaker refuses before it half-opens.
	OpenFor time.Duration
	// HalfOpenProbes is how many attempts a half-open breaker admits at
	// once; the first to succeed closes it, the first to fail re-opens it.
	HalfOpenProbes int
}

// Ticket is an admission: the state and generation the attempt was
// admitted under, recorded on the attempt, and handed back with its
// outcome.
type Ticket struct {
	State      State
	Generation int64
	probe      bool
}

// ProbeTicket is a ticket issued elsewhere (a breaker shared by several
// gateways): probe says it holds a half-open breaker's probe slot.
func ProbeTicket(st State, gen int64, probe bool) Ticket {
	return Ticket{State: st, Generation: gen, probe: probe}
}

// Probe reports whether the ticket holds a half-open breaker's probe slot.
func (t Ticket) Probe() bool { return t.probe }

// Breaker is one route's circuit breaker. It is safe for concurrent use.
type Breaker struct {
	cfg      Config
	clock    clock.Clock
	mu       sync.Mutex
	state    State
	gen      int64
	openedAt time.Time
	probes   int     // admitted half-open probes still in flight
	counts   rolling // successes, failures while closed
	// probeOK and probeFailed count the half-open probes' outcomes.
	probeOK, probeFailed int
	// inflight counts the attempts admitted while closed, in this
	// generation, whose outcome is not in yet (see Opens).
	inflight int
}

// New returns a closed breaker at generation 1.
// Opens reports whether a closed breaker opens with ok and failed
// outcomes in its window and inflight admitted attempts whose outcome is
// not in: at least min_requests outcomes, and failures at least
// failure_ratio of every attempt admitted — those in flight counted as
// not failed. A failure usually comes back faster than an answer (a 503
// at once, a generation in seconds), so right after a breaker closes
// the first outcomes in are mostly failures even when most attempts will
// succeed; judged on them alone, a provider browned out at 30 % would be
// shut out again within a second of every recovery.
func Opens(cfg Config, ok, failed, inflight int64) bool {
	total := ok + failed
	return total >= int64(cfg.MinRequests) && float64(failed) >= cfg.FailureRatio*float64(total+max(0, inflight))
}

// ProbeVerdicts is how many of a half-open breaker's probes decide it:
// failAt failures re-open it, closeAt successes (one) close it. failAt
// follows failure_ratio over the half_open_probes (⌈ratio × probes⌉, at
// least one), so that a provider failing 30 % of calls is not shut out
// again by its first failed probe — which, a failure coming back faster
// than an answer, would usually be the first outcome in — while the
// first answer still gives the route back at once.
func ProbeVerdicts(cfg Config) (failAt, closeAt int) {
	probes := max(1, cfg.HalfOpenProbes)
	failAt = min(probes, max(1, int(math.Ceil(cfg.FailureRatio*float64(probes)-1e-9))))
	return failAt, 1
}

func New(cfg Config, clk clock.Clock) *Breaker {
	return &Breaker{cfg: cfg, clock: clk, gen: 1, counts: newRolling(cfg.Window)}
}

// refresh half-opens an open breaker whose open_for has passed.
func (b *Breaker) refresh(now time.Time) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		b.state, b.probes, b.probeOK, b.probeFailed = HalfOpen, 0, 0, 0
		b.gen++
	}
}

func (b *Breaker) transition(s State, now time.Time) {
	b.state = s
	b.gen++
	b.probes, b.probeOK, b.probeFailed, b.inflight = 0, 0, 0, 0
	b.counts.reset()
	if s == Open {
		b.openedAt = now
	}
}

// Allows reports, without taking anything, whether an attempt would be
// admitted now.
func (b *Breaker) Allows() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh(b.clock.Now())
	return b.state == Closed || (b.state == HalfOpen && b.probes < b.cfg.HalfOpenProbes)
}

// Acquire admits an attempt, taking a probe slot when half-open; ok is
// false when the breaker refuses. Every admitted ticket must be handed
// back to Done.
func (b *Breaker) Acquire() (t Ticket, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh(b.clock.Now())
	switch {
	case b.state == Closed:
		b.inflight++
		return Ticket{State: Closed, Generation: b.gen}, true
	case b.state == HalfOpen && b.probes < b.cfg.HalfOpenProbes:
		b.probes++
		return Ticket{State: HalfOpen, Generation: b.gen, probe: true}, true
	}
	return Ticket{State: b.state, Generation: b.gen}, false
}

// Done reports an admitted attempt's outcome. Outcomes of an earlier
// generation (admitted before the breaker last changed state) are stale
// and change nothing.
func (b *Breaker) Done(t Ticket, o Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.refresh(now)
	if t.Generation != b.gen {
		return
	}
	switch {
	case t.probe && b.state == HalfOpen:
		b.probes--
		failAt, closeAt := ProbeVerdicts(b.cfg)
		switch o {
		case Success:
			if b.probeOK++; b.probeOK >= closeAt {
				b.transition(Closed, now)
			}
		case Failure:
			if b.probeFailed++; b.probeFailed >= failAt {
				b.transition(Open, now)
			}
		}
	case b.state == Closed:
		b.inflight--
		if o == Ignore {
			return
		}
		i := 0
		if o == Failure {
			i = 1
		}
		b.counts.add(now, i, 1)
		ok, failed := b.counts.sum(now)
		if Opens(b.cfg, ok, failed, int64(b.inflight)) {
			b.transition(Open, now)
		}
	}
}

// State returns the breaker's state and generation now.
func (b *Breaker) State() (State, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh(b.clock.Now())
	return b.state, b.gen
}

// Set is the breakers of a set of routes (a reload may add some). It is safe for concurrent
// use; a route it does not know is always admitted.
type Set struct {
	cur atomic.Pointer[setRoutes]
	cfg Config
	clk clock.Clock
}

// setRoutes is a Set's breakers: replaced whole when routes are added, so
// readers never lock.
type setRoutes struct {
	m     map[string]*Breaker
	order []string
}

// NewSet returns closed breakers for routes.
func NewSet(cfg Config, clk clock.Clock, routes []string) *Set {
	s := &Set{cfg: cfg, clk: clk}
	s.cur.Store(&setRoutes{m: map[string]*Breaker{}})
	s.AddRoutes(routes)
	return s
}

// AddRoutes gives routes the set does not know yet a closed breaker (a
// reload added them); the others keep theirs. Safe beside every other
// call; concurrent AddRoutes calls must not overlap.
func (s *Set) AddRoutes(routes []string) {
	old := s.cur.Load()
	next := &setRoutes{m: make(map[string]*Breaker, len(old.m)+len(routes)), order: append([]string(nil), old.order...)}
	for r, b := range old.m {
		next.m[r] = b
	}
	for _, r := range routes {
		if _, ok := next.m[r]; !ok {
			next.m[r] = New(s.cfg, s.clk)
			next.order = append(next.order, r)
		}
	}
	s.cur.Store(next)
}

// Allows reports whether route would admit an attempt now.
func (s *Set) Allows(route string) bool {
	b := s.cur.Load().m[route]
	return b == nil || b.Allows()
}

// Acquire admits an attempt on route (see Breaker.Acquire).
func (s *Set) Acquire(route string) (Ticket, bool) {
	b := s.cur.Load().m[route]
	if b == nil {
		return Ticket{State: Closed}, true
	}
	return b.Acquire()
}

// Done reports the outcome of an attempt admitted on route.
func (s *Set) Done(route string, t Ticket, o Outcome) {
	if b := s.cur.Load().m[route]; b != nil {
		b.Done(t, o)
	}
}

// States calls f with every route's state, in the order routes were given.
func (s *Set) States(f func(route string, st State, gen int64)) {
	cur := s.cur.Load()
	for _, r := range cur.order {
		st, gen := cur.m[r].State()
		f(r, st, gen)
	}
}
