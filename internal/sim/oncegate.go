package sim

import (
	"strconv"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/retry"
)

// oncegate serves one request at a replica as the gateway does: the
// engine decides every attempt; each attempt holds its route's breaker
// ticket and, on a provider the request already tried, a retry from that
// provider's budget (on another, it counts as a first attempt there); an
// error tells the client not to retry.
func (s *sim) oncegate(a *action, replica int, reply func(ok, shouldRetry bool)) {
	r := &request{s: s, a: a, reply: reply, pol: s.alias.Engine}
	r.req = &retry.Request{ID: "a" + strconv.Itoa(a.id) + "-" + strconv.Itoa(a.retries) + "@" + strconv.Itoa(replica),
		Deadline: s.clock.Now().Add(r.pol.Deadline), InputTokens: 50, MaxOutputTokens: 200}
	adm := s.admission(false)
	d := retry.Start(r.pol, r.req, adm, s.clock.Now())
	r.step(d, adm)
}

// request is one logical request in the oncegate fleet.
type request struct {
	s     *sim
	a     *action
	reply func(ok, shouldRetry bool)
	pol   *retry.Policy
	req   *retry.Request
	hist  []retry.Attempt
}

// step dispatches d, decided under adm — once admitted, and not before
// its time — or answers the client if d dispatches nothing.
func (r *request) step(d retry.Decision, adm retry.Admission) {
	d, ticket, err := r.admit(d, adm)
	switch {
	case err != nil:
		r.reply(false, false)
		return
	case !d.Dispatches():
		r.reply(d.Terminal == gw.TerminalSucceeded, false)
		return
	}
	if wait := d.NotBefore.Sub(r.s.clock.Now()); wait > 0 {
		r.s.at(r.s.now+wait, func() { r.send(d, ticket) })
		return
	}
	r.send(d, ticket)
}

// admit takes what d needs, as the gateway's admit does: the route's
// breaker ticket, and a retry from the provider's budget (or a first
// attempt there). Each refusal tightens adm and the engine decides again.
func (r *request) admit(d retry.Decision, adm retry.Admission) (retry.Decision, breaker.Ticket, error) {
	s := r.s
	for d.Dispatches() {
		t, ok := s.breakers.Acquire(d.Route)
		prov := s.providerOf(d.Route)
		switch retrying := len(r.hist) > 0 && s.tried(r.hist, prov); {
		case !ok:
			adm.Refused = with(adm.Refused, d.Route)
		case retrying && !s.budget.Retry(prov):
			s.breakers.Done(d.Route, t, breaker.Ignore)
			adm.RetryRefused = with(adm.RetryRefused, prov)
		default:
			if !retrying {
				s.budget.First(prov) // the request's first attempt there
			}
			return d, t, nil
		}
		var err error
		if d, err = retry.Decide(r.pol, r.req, r.hist, adm); err != nil {
			return d, breaker.Ticket{}, err
		}
	}
	return d, breaker.Ticket{}, nil
}

// with returns set (made if nil) with key in it.
func with(set map[string]bool, key string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[key] = true
	return set
}

// send makes the attempt d on its provider and, when it ends, reports it
// to the breaker and decides what follows.
func (r *request) send(d retry.Decision, ticket breaker.Ticket) {
	s := r.s
	started := s.clock.Now()
	s.call(r.a, s.upstreamOf(d.Route), func(ok bool, k gw.Kind) {
		out := breaker.Success
		if !ok {
			out = breaker.Failure
		}
		s.breakers.Done(d.Route, ticket, out)
		r.hist = append(r.hist, retry.Attempt{Ordinal: len(r.hist) + 1, Route: d.Route, Purpose: d.Purpose(),
			NotBefore: d.NotBefore, StartedAt: started, ObservedAt: s.clock.Now(), JitterMS: d.JitterMS, Kind: k})
		adm := s.admission(true)
		next, err := retry.Decide(r.pol, r.req, r.hist, adm)
		if err != nil {
			r.reply(false, false)
			return
		}
		r.step(next, adm)
	})
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
