// Package sim is a deterministic discrete-event simulation of a fleet of
// gateways past what one machine can run: many replicas sharing the
// providers' retry budgets and the circuit breakers, a million users
// whose clients retry as the official SDKs do, and a provider with an
// outage, a brown-out and a recovery — alone, or with a healthy fallback
// provider behind a second route. The oncegate fleet is driven by the
// real retry engine (internal/retry), breakers and budget
// (internal/breaker) under simulated time; the naive stack beside it —
// SDK retries × a gateway's retries × a second gateway layer's — is what
// a stack without a single retry owner does. docs/simulation.md explains
// the model.
package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
)

// Fleet is the oncegate fleet's configuration in the simulations: one
// route, three attempts, the default retry budget and breaker (the
// alias is "chat").
const Fleet = `
tenants: [{id: users, api_key_env: SIM_KEY}]
providers: [{id: provider, type: openai, base_url: "http://provider.invalid/v1"}]
routes:
  - {id: primary, provider: provider, model: m, behavior_class: c, data_boundary: external, max_attempts: 3,
     capabilities: {max_context_tokens: 100000, max_output_tokens: 4096}}
models:
  - {name: chat, routes: [primary], retry: {max_attempts: 3, base_delay: 200ms, max_delay: 1500ms, deadline: 30s}}
retry_budget: {ratio: 0.1, min_per_second: 10, window: 10s}
breaker: {failure_ratio: 0.5, min_requests: 20, window: 10s, open_for: 30s, half_open_probes: 3}
`

// FleetWithFallback is Fleet with a fallback route on a second provider
// ("backup"), the primary route taking at most primaryAttempts of the
// alias's three attempts: with 2, the last is always left for the
// fallback (docs/overload.md).
func FleetWithFallback(primaryAttempts int) string {
	return fmt.Sprintf(`
tenants: [{id: users, api_key_env: SIM_KEY}]
providers:
  - {id: provider, type: openai, base_url: "http://provider.invalid/v1"}
  - {id: backup, type: openai, base_url: "http://backup.invalid/v1"}
routes:
  - {id: primary, provider: provider, model: m, behavior_class: c, data_boundary: external, max_attempts: %d,
     capabilities: {max_context_tokens: 100000, max_output_tokens: 4096}}
  - {id: fallback, provider: backup, model: m, behavior_class: c, data_boundary: external, max_attempts: 3,
     capabilities: {max_context_tokens: 100000, max_output_tokens: 4096}}
models:
  - {name: chat, routes: [primary, fallback], retry: {max_attempts: 3, base_delay: 200ms, max_delay: 1500ms, deadline: 30s}}
retry_budget: {ratio: 0.1, min_per_second: 10, window: 10s}
breaker: {failure_ratio: 0.5, min_requests: 20, window: 10s, open_for: 30s, half_open_probes: 3}
`, primaryAttempts)
}

// Provider is how an upstream behaves over simulated time.
type Provider struct {
	// Capacity is how many calls a second it can serve; calls past it
	// in a second fail as overloaded (503). 0: no limit.
	Capacity int
	// Every call fails (503) from OutageStart to OutageEnd.
	OutageStart, OutageEnd time.Duration
	// From OutageEnd to BrownoutEnd, BrownoutFailure of the calls fail.
	BrownoutEnd     time.Duration
	BrownoutFailure float64
	// Latency is a successful call's duration, FailLatency a failed one's.
	Latency, FailLatency time.Duration
}

// Stack is the kind of fleet simulated.
type Stack string

// The stacks.
const (
	// Naive: clients retry every 5xx twice (as the SDKs do without
	// x-should-retry), each call goes through a gateway that tries three
	// times, in front of a second gateway layer that tries three times:
	// up to 27 upstream calls per user action.
	Naive Stack = "naive"
	// Oncegate: the gateways are one retry owner with the fleet's
	// breakers and retry budget; every error tells clients not to retry.
	Oncegate Stack = "oncegate"
)

// Config is one simulation.
type Config struct {
	Stack    Stack
	Replicas int
	// Users each make one action, at a uniformly random moment of
	// Arrivals.
	Users    int
	Arrivals time.Duration
	// Horizon is when the simulation ends (after Arrivals, so that the
	// last actions finish).
	Horizon time.Duration
	// Provider is the primary: the provider of the alias's first route,
	// the one the naive stack calls.
	Provider Provider
	// Fallback is the provider behind the alias's routes on any other
	// provider (FleetWithFallback); nil when the alias has one provider.
	Fallback *Provider
	// Policy is the oncegate fleet's configuration (one alias, "chat").
	Policy *policy.Policy
	// Patience: a user action not answered within it is a deadline miss.
	Patience time.Duration
	// PriceUSD is what one completed generation costs.
	PriceUSD float64
	Seed     uint64
}

// Second is what one simulated second saw.
type Second struct {
	Actions int // user actions that began
	Calls   int // upstream calls, on any provider
	// FallbackCalls are the calls on the fallback provider.
	FallbackCalls int
	Succeeded     int // user actions answered successfully, by when they were answered
	Failed        int // user actions that ended without an answer
}

// Result is a simulation's outcome.
type Result struct {
	Config  Config
	Actions int
	// Succeeded, Failed and Missed count user actions: answered, given
	// up, and answered (or given up) after Patience.
	Succeeded, Failed, Missed int
	Calls                     int
	// CallsPerAction during the outage and after it (actions that began
	// in each period).
	CallsPerActionOutage, CallsPerActionAfter float64
	// Outage and Brownout are what the actions that began in the outage
	// and in the brown-out saw.
	Outage, Brownout Period
	// Recovery is how long after the provider's return (OutageEnd; it may
	// still be browned out) the fleet answers again: the first second from
	// which 95 % of the actions answered until the arrivals end were
	// answered successfully. Negative: it did not recover.
	Recovery time.Duration
	SpendUSD float64
	Seconds  []Second
}

// Period is what the user actions that began in one period of the
// primary provider's profile saw, counted when they ended.
type Period struct {
	Actions, Succeeded int
	// Calls went to any provider; PrimaryCalls to the primary, made by
	// the PrimaryActions that reached it at all (for oncegate, each such
	// action's first attempt there: what its retry budget counts as a
	// first attempt).
	Calls, PrimaryCalls, PrimaryActions int
}

// SuccessRate is the share of the period's actions that were answered.
func (p Period) SuccessRate() float64 { return ratio(p.Succeeded, p.Actions) }

// PrimaryAmplification is the primary's calls per action that reached it:
// 1 when nothing is retried there.
func (p Period) PrimaryAmplification() float64 { return ratio(p.PrimaryCalls, p.PrimaryActions) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Run simulates cfg; the same cfg always gives the same Result.
func Run(cfg Config) (*Result, error) {
	if cfg.Replicas < 1 || cfg.Users < 1 || cfg.Arrivals <= 0 || cfg.Horizon < cfg.Arrivals {
		return nil, fmt.Errorf("sim: want replicas ≥ 1, users ≥ 1 and 0 < arrivals ≤ horizon")
	}
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x0ce6a7e)), start: time.Unix(1_800_000_000, 0).UTC(),
		secs: make([]Second, int(cfg.Horizon/time.Second)+1)}
	s.clock = &simClock{s: s}
	s.primary = &upstream{Provider: cfg.Provider}
	if cfg.Fallback != nil {
		s.fallback = &upstream{Provider: *cfg.Fallback, fallback: true}
	}
	if cfg.Stack == Oncegate {
		if cfg.Policy == nil || cfg.Policy.Alias("chat") == nil {
			return nil, fmt.Errorf("sim: the oncegate stack needs a policy with an alias \"chat\"")
		}
		s.alias = cfg.Policy.Alias("chat")
		if err := s.checkProviders(); err != nil {
			return nil, err
		}
		// One breaker set and one retry budget for the whole fleet, as
		// Redis makes them for replicas (docs/replicas.md).
		s.breakers = breaker.NewSet(cfg.Policy.BreakerConfig(), s.clock, cfg.Policy.RouteIDs())
		s.budget = breaker.NewBudget(cfg.Policy.BudgetConfig(), s.clock)
	}
	s.res = &Result{Config: cfg}
	for i := range cfg.Users {
		at := time.Duration(s.rng.Int64N(int64(cfg.Arrivals)))
		s.at(at, func() { s.action(i) })
	}
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at > cfg.Horizon {
			break
		}
		s.now = e.at
		e.fn()
	}
	s.finish()
	return s.res, nil
}

// sim is one run's state.
type sim struct {
	cfg      Config
	rng      *rand.Rand
	start    time.Time
	now      time.Duration
	q        queue
	seq      uint64
	clock    *simClock
	alias    *policy.Alias
	breakers *breaker.Set
	budget   *breaker.Budget
	res      *Result
	secs     []Second
	// primary is the provider of the alias's first route; fallback the
	// other one, if any.
	primary, fallback *upstream
	// calls by the period their action began in
	outageCalls, outageActions, afterCalls, afterActions int
}

// upstream is one simulated provider and the calls it took this second.
type upstream struct {
	Provider
	fallback bool
	// served counts the calls that reached it in second servedSec.
	servedSec, served int
}

// fails draws whether a call that reaches the provider at now fails. It
// takes the first Capacity calls of each second; the rest fail as
// overloaded — retries of failed calls take the places of new ones,
// which is how a retry storm outlasts its outage.
func (u *upstream) fails(now time.Duration, rng *rand.Rand) bool {
	if i := int(now / time.Second); i != u.servedSec {
		u.servedSec, u.served = i, 0
	}
	u.served++
	switch {
	case now >= u.OutageStart && now < u.OutageEnd:
		return true
	case u.Capacity > 0 && u.served > u.Capacity:
		return true
	case now >= u.OutageEnd && now < u.BrownoutEnd:
		return rng.Float64() < u.BrownoutFailure
	}
	return false
}

// checkProviders makes sure every route of the alias has a simulated
// provider: the first route's is the primary, any other the fallback.
func (s *sim) checkProviders() error {
	first := s.alias.Routes[0].Provider.ID
	for _, r := range s.alias.Routes {
		if r.Provider.ID != first && s.fallback == nil {
			return fmt.Errorf("sim: route %s is on provider %s, not %s: Config.Fallback must describe it", r.ID, r.Provider.ID, first)
		}
	}
	return nil
}

// upstreamOf is the simulated provider behind one of the alias's routes.
func (s *sim) upstreamOf(route string) *upstream {
	if s.fallback != nil && s.providerOf(route) != s.alias.Routes[0].Provider.ID {
		return s.fallback
	}
	return s.primary
}

// simClock is the simulation's time as the breakers and budget read it.
type simClock struct{ s *sim }

// Now is the simulated moment.
func (c *simClock) Now() time.Time { return c.s.start.Add(c.s.now) }

func (s *sim) at(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: d, seq: s.seq, fn: fn})
}

func (s *sim) sec(d time.Duration) *Second {
	i := int(d / time.Second)
	if i >= len(s.secs) {
		i = len(s.secs) - 1
	}
	return &s.secs[i]
}

// period says which period an action that began at d belongs to: 1
// during the outage, 2 after it (3 in the brown-out, which is after it
// too), 0 before.
func (s *sim) period(d time.Duration) int {
	p := s.cfg.Provider
	switch {
	case d >= p.OutageStart && d < p.OutageEnd:
		return 1
	case d >= p.OutageEnd && d < p.BrownoutEnd:
		return 3
	case d >= p.OutageEnd:
		return 2
	}
	return 0
}

// action is one user's action: a client that retries as the SDKs do.
type action struct {
	id      int
	began   time.Duration
	retries int
	calls   int
	// primaryCalls of its calls went to the primary provider.
	primaryCalls int
	done         bool
}

func (s *sim) action(id int) {
	a := &action{id: id, began: s.now}
	s.res.Actions++
	s.sec(s.now).Actions++
	s.clientAttempt(a)
}

// SDK retry behaviour (openai-go, anthropic-sdk-go): two retries, 0.5 s
// then 1 s (doubling, at most 8 s), less up to 25 % jitter; a response
// with x-should-retry: false is never retried.
const sdkRetries = 2

func (s *sim) sdkDelay(retries int) time.Duration {
	d := min(0.5*math.Pow(2, float64(retries)), 8)
	d *= 1 - 0.25*s.rng.Float64()
	return time.Duration(d * float64(time.Second))
}

// clientAttempt sends the action's request to a gateway; reply answers it.
func (s *sim) clientAttempt(a *action) {
	replica := s.rng.IntN(s.cfg.Replicas)
	reply := func(ok, shouldRetry bool) {
		if ok {
			s.answer(a, true)
			return
		}
		if shouldRetry && a.retries < sdkRetries {
			a.retries++
			s.at(s.now+s.sdkDelay(a.retries-1), func() { s.clientAttempt(a) })
			return
		}
		s.answer(a, false)
	}
	if s.cfg.Stack == Oncegate {
		s.oncegate(a, replica, reply)
		return
	}
	s.naiveLayer(a, 1, reply)
}

// answer ends an action.
func (s *sim) answer(a *action, ok bool) {
	if a.done {
		return
	}
	a.done = true
	if ok {
		s.res.Succeeded++
		s.sec(s.now).Succeeded++
	} else {
		s.res.Failed++
		s.sec(s.now).Failed++
	}
	if s.now-a.began > s.cfg.Patience {
		s.res.Missed++
	}
	switch s.period(a.began) {
	case 1:
		s.outageCalls += a.calls
		s.outageActions++
		s.res.Outage.add(a, ok)
	case 3:
		s.res.Brownout.add(a, ok)
		fallthrough
	case 2:
		s.afterCalls += a.calls
		s.afterActions++
	}
}

// add counts an action that ended (answered if ok) into p.
func (p *Period) add(a *action, ok bool) {
	p.Actions++
	if ok {
		p.Succeeded++
	}
	p.Calls += a.calls
	p.PrimaryCalls += a.primaryCalls
	if a.primaryCalls > 0 {
		p.PrimaryActions++
	}
}

// Naive gateway layers: three attempts each, retrying any 5xx after
// 20 ms then 40 ms, telling the caller nothing about retrying.
const (
	naiveAttempts = 3
	naiveBase     = 20 * time.Millisecond
)

// naiveLayer is a gateway that retries every failure: layer 1 sends to a
// layer-0 gateway, layer 0 to the provider. It answers reply(ok,
// shouldRetry) — a naive gateway's 5xx says nothing, so SDKs retry it.
func (s *sim) naiveLayer(a *action, layer int, reply func(ok, shouldRetry bool)) {
	var try func(n int)
	try = func(n int) {
		next := func(ok bool) {
			if ok || n+1 >= naiveAttempts {
				reply(ok, !ok)
				return
			}
			s.at(s.now+naiveBase<<n, func() { try(n + 1) })
		}
		if layer == 0 {
			s.call(a, s.primary, func(ok bool, _ gw.Kind) { next(ok) })
			return
		}
		s.naiveLayer(a, layer-1, func(ok, _ bool) { next(ok) })
	}
	try(0)
}

// call is one upstream call to u; done reports its outcome when it ends.
func (s *sim) call(a *action, u *upstream, done func(ok bool, k gw.Kind)) {
	a.calls++
	s.res.Calls++
	sec := s.sec(s.now)
	sec.Calls++
	if u.fallback {
		sec.FallbackCalls++
	} else {
		a.primaryCalls++
	}
	if u.fails(s.now, s.rng) {
		s.at(s.now+u.FailLatency, func() { done(false, gw.KindUnavailable) })
		return
	}
	s.res.SpendUSD += s.cfg.PriceUSD
	s.at(s.now+u.Latency, func() { done(true, gw.KindOK) })
}

// finish computes the summary figures.
func (s *sim) finish() {
	r := s.res
	r.Seconds = s.secs
	if s.outageActions > 0 {
		r.CallsPerActionOutage = float64(s.outageCalls) / float64(s.outageActions)
	}
	if s.afterActions > 0 {
		r.CallsPerActionAfter = float64(s.afterCalls) / float64(s.afterActions)
	}
	back := s.cfg.Provider.OutageEnd
	r.Recovery = -1
	for i := int(back / time.Second); i < int(s.cfg.Arrivals/time.Second); i++ {
		if recovered(s.secs[i:min(len(s.secs), int(s.cfg.Arrivals/time.Second))]) {
			r.Recovery = time.Duration(i)*time.Second - back
			if r.Recovery < 0 {
				r.Recovery = 0
			}
			return
		}
	}
}

// recovered: from the first of secs on, 95 % of the answers are
// successes.
func recovered(secs []Second) bool {
	ok, all := 0, 0
	for _, x := range secs {
		ok += x.Succeeded
		all += x.Succeeded + x.Failed
	}
	return all > 0 && float64(ok) >= 0.95*float64(all)
}

// event is something that happens at a simulated moment; seq keeps
// events of one moment in the order they were scheduled.
type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
