// Package sim is a deterministic discrete-event simulation of a fleet of
// gateways past what one machine can run: many replicas sharing the fleet
// retry budget and the circuit breakers, a million users whose clients
// retry as the official SDKs do, and a provider with an outage, a
// brown-out and a recovery. The oncegate fleet is driven by the real
// retry engine (internal/retry), breakers and budget (internal/breaker)
// under simulated time; the naive stack beside it — SDK retries × a
// gateway's retries × a second gateway layer's — is what a stack without
// a single retry owner does. docs/simulation.md explains the model.
package sim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/retry"
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

// Provider is how the upstream behaves over simulated time.
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
	Horizon  time.Duration
	Provider Provider
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
	Actions   int // user actions that began
	Calls     int // upstream calls
	Succeeded int // user actions answered successfully, by when they were answered
	Failed    int // user actions that ended without an answer
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
	// Recovery is how long after the provider's return (OutageEnd; it may
	// still be browned out) the fleet answers again: the first second from
	// which 95 % of the actions answered until the arrivals end were
	// answered successfully. Negative: it did not recover.
	Recovery time.Duration
	SpendUSD float64
	Seconds  []Second
}

// Run simulates cfg; the same cfg always gives the same Result.
func Run(cfg Config) (*Result, error) {
	if cfg.Replicas < 1 || cfg.Users < 1 || cfg.Arrivals <= 0 || cfg.Horizon < cfg.Arrivals {
		return nil, fmt.Errorf("sim: want replicas ≥ 1, users ≥ 1 and 0 < arrivals ≤ horizon")
	}
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x0ce6a7e)), start: time.Unix(1_800_000_000, 0).UTC(),
		secs: make([]Second, int(cfg.Horizon/time.Second)+1)}
	s.clock = &simClock{s: s}
	if cfg.Stack == Oncegate {
		if cfg.Policy == nil || cfg.Policy.Alias("chat") == nil {
			return nil, fmt.Errorf("sim: the oncegate stack needs a policy with an alias \"chat\"")
		}
		s.alias = cfg.Policy.Alias("chat")
		// One breaker set and one retry budget for the whole fleet, as
		// Redis makes them for replicas (docs/replicas.md).
		s.breakers = breaker.NewSet(gateway.BreakerConfig(cfg.Policy), s.clock, gateway.RouteIDs(cfg.Policy))
		s.budget = breaker.NewBudget(gateway.BudgetConfig(cfg.Policy), s.clock)
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
	// served counts the calls that reached the provider in the current
	// second.
	servedSec int
	served    int
	// calls by the period their action began in
	outageCalls, outageActions, afterCalls, afterActions int
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
// during the outage, 2 after it, 0 before.
func (s *sim) period(d time.Duration) int {
	p := s.cfg.Provider
	switch {
	case d >= p.OutageStart && d < p.OutageEnd:
		return 1
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
	done    bool
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
	case 2:
		s.afterCalls += a.calls
		s.afterActions++
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
			s.call(a, func(ok bool, _ gw.Kind) { next(ok) })
			return
		}
		s.naiveLayer(a, layer-1, func(ok, _ bool) { next(ok) })
	}
	try(0)
}

// call is one upstream call; done reports its outcome when it ends.
func (s *sim) call(a *action, done func(ok bool, k gw.Kind)) {
	a.calls++
	s.res.Calls++
	s.sec(s.now).Calls++
	p := s.cfg.Provider
	if i := int(s.now / time.Second); i != s.servedSec {
		s.servedSec, s.served = i, 0
	}
	// The provider takes the first Capacity calls of each second; the
	// rest fail as overloaded — retries of failed calls take the places
	// of new ones, which is how a retry storm outlasts its outage.
	s.served++
	fail := false
	switch {
	case s.now >= p.OutageStart && s.now < p.OutageEnd:
		fail = true
	case p.Capacity > 0 && s.served > p.Capacity:
		fail = true
	case s.now >= p.OutageEnd && s.now < p.BrownoutEnd:
		fail = s.rng.Float64() < p.BrownoutFailure
	}
	if fail {
		s.at(s.now+p.FailLatency, func() { done(false, gw.KindUnavailable) })
		return
	}
	s.res.SpendUSD += s.cfg.PriceUSD
	s.at(s.now+p.Latency, func() { done(true, gw.KindOK) })
}

// oncegate serves one request at a replica as the gateway does: the
// engine decides every attempt; each attempt holds its route's breaker
// ticket and, after the first, a retry from the fleet budget; an error
// tells the client not to retry.
func (s *sim) oncegate(a *action, replica int, reply func(ok, shouldRetry bool)) {
	pol := s.alias.Engine
	req := &retry.Request{ID: "a" + strconv.Itoa(a.id) + "-" + strconv.Itoa(a.retries) + "@" + strconv.Itoa(replica),
		Deadline: s.clock.Now().Add(pol.Deadline), InputTokens: 50, MaxOutputTokens: 200}
	var hist []retry.Attempt
	d := retry.Start(pol, req, s.admission(false), s.clock.Now())
	if d.Dispatches() {
		s.budget.First(s.providerOf(d.Route))
	}
	var step func(d retry.Decision)
	step = func(d retry.Decision) {
		var ticket breaker.Ticket
		for d.Dispatches() {
			adm := s.admission(len(hist) > 0)
			t, ok := s.breakers.Acquire(d.Route)
			prov := s.providerOf(d.Route)
			retrying := len(hist) > 0 && s.tried(hist, prov)
			if ok && retrying && !s.budget.Retry(prov) {
				s.breakers.Done(d.Route, t, breaker.Ignore)
				if adm.RetryRefused == nil {
					adm.RetryRefused = map[string]bool{}
				}
				adm.RetryRefused[prov], ok = true, false
			} else if ok && len(hist) > 0 && !retrying {
				s.budget.First(prov) // a fallback: a first attempt there
			} else if !ok {
				if adm.Refused == nil {
					adm.Refused = map[string]bool{}
				}
				adm.Refused[d.Route] = true
			}
			if ok {
				ticket = t
				break
			}
			var err error
			if d, err = retry.Decide(pol, req, hist, adm); err != nil {
				reply(false, false)
				return
			}
		}
		if !d.Dispatches() {
			reply(d.Terminal == gw.TerminalSucceeded, false)
			return
		}
		send := func() {
			started := s.clock.Now()
			s.call(a, func(ok bool, k gw.Kind) {
				out := breaker.Success
				if !ok {
					out = breaker.Failure
				}
				s.breakers.Done(d.Route, ticket, out)
				hist = append(hist, retry.Attempt{Ordinal: len(hist) + 1, Route: d.Route, Purpose: d.Purpose(),
					NotBefore: d.NotBefore, StartedAt: started, ObservedAt: s.clock.Now(), JitterMS: d.JitterMS, Kind: k})
				next, err := retry.Decide(pol, req, hist, s.admission(true))
				if err != nil {
					reply(false, false)
					return
				}
				step(next)
			})
		}
		if wait := d.NotBefore.Sub(s.clock.Now()); wait > 0 {
			s.at(s.now+wait, send)
			return
		}
		send()
	}
	step(d)
}

// admission is the fleet's state for a decision, as the gateway builds it.
func (s *sim) admission(retrying bool) retry.Admission {
	var adm retry.Admission
	for _, r := range s.alias.Routes {
		if !s.breakers.Allows(r.ID) {
			if adm.Refused == nil {
				adm.Refused = map[string]bool{}
			}
			adm.Refused[r.ID] = true
		}
		if retrying && !s.budget.Allows(r.Provider.ID) {
			if adm.RetryRefused == nil {
				adm.RetryRefused = map[string]bool{}
			}
			adm.RetryRefused[r.Provider.ID] = true
		}
	}
	return adm
}

// providerOf is the provider of one of the alias's routes.
func (s *sim) providerOf(route string) string {
	if r := s.alias.Route(route); r != nil {
		return r.Provider.ID
	}
	return ""
}

// tried reports whether hist has an attempt on provider.
func (s *sim) tried(hist []retry.Attempt, provider string) bool {
	for _, a := range hist {
		if s.providerOf(a.Route) == provider {
			return true
		}
	}
	return false
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
