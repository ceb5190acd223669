package retry

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/gw"
)

// A long rate-limit hint cools its route down (docs/retries.md): one row
// per rule. testPolicy: base 200 ms, max 1.5 s, retry_after_cap 5 s,
// routes A, B, C (each a tier of its own unless tiered).
func TestCoolingTable(t *testing.T) {
	rl, unav := gw.KindRateLimited, gw.KindUnavailable
	hint := func(d time.Duration) func(*Attempt) {
		return func(a *Attempt) { a.RetryAfter, a.HasRetryAfter = d, true }
	}
	with := func(a Attempt, f func(*Attempt)) Attempt { f(&a); return a }
	// tierAB: A and B share tier 0, C is tier 1; three attempts a route.
	tierAB := func(p *Policy) {
		p.Tiered, p.MaxAttempts = true, 9
		for i, tier := range []int{0, 0, 1} {
			p.Routes[i].Tier, p.Routes[i].MaxAttempts, p.Routes[i].Weight = tier, 3, 1
		}
	}
	cooling := func(at map[string]int) Admission {
		adm := Admission{Cooling: map[string]time.Time{}}
		for id, until := range at {
			adm.Cooling[id] = t0.Add(ms(until))
		}
		return adm
	}
	tests := []struct {
		name   string
		policy func(*Policy)
		req    func(*Request)
		adm    Admission
		hist   []Attempt
		want   Decision
	}{
		{name: "a hint over the cap goes to the next tier at once",
			hist: []Attempt{with(att(1, "A", rl, 1000), hint(20*time.Second))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(1200)), JitterMS: 200}},
		{name: "a hint within the cap, no other route in the tier: the same route, after the hint",
			hist: []Attempt{with(att(1, "A", rl, 1000), hint(3*time.Second))},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(4000)), JitterMS: 200}},
		{name: "a hint within the cap past the deadline goes to the next tier at once",
			req:  func(r *Request) { r.Deadline = t0.Add(3 * time.Second) },
			hist: []Attempt{with(att(1, "A", rl, 1000), hint(2500*time.Millisecond))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(1200)), JitterMS: 200}},
		{name: "a hint within the cap moves to another route of the tier at once", policy: tierAB,
			hist: []Attempt{att(1, "A", unav, 100), att(2, "B", unav, 400), with(att(3, "A", rl, 1000), hint(3*time.Second))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(1200)), JitterMS: 200}},
		{name: "a hint no longer than the backoff is honoured on the same route", policy: tierAB,
			hist: []Attempt{att(1, "A", unav, 100), att(2, "B", unav, 400), with(att(3, "A", rl, 1000), hint(ms(400)))},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1400)), JitterMS: 400}},
		{name: "a cooling route of the tier is passed over on a retry", policy: tierAB, adm: cooling(map[string]int{"B": 9000}),
			hist: []Attempt{att(1, "A", unav, 100), att(2, "B", unav, 400), att(3, "A", unav, 1000)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1400)), JitterMS: 400}},
		{name: "a route cooling as the request failed elsewhere is not its next tier", adm: cooling(map[string]int{"B": 9000}),
			policy: func(p *Policy) { p.Routes[0].MaxAttempts = 1 },
			hist:   []Attempt{att(1, "A", unav, 100)},
			want:   Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "a cooling that ended no longer counts", adm: cooling(map[string]int{"A": 500}),
			hist: []Attempt{att(1, "A", unav, 500)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(700)), JitterMS: 200}},
		{name: "every route cooling: the same route, waiting for it at most the cap",
			policy: func(p *Policy) { p.Routes = p.Routes[:1] }, adm: cooling(map[string]int{"A": 60000}),
			hist: []Attempt{att(1, "A", unav, 1000)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(6000)), JitterMS: 200}},
		{name: "an earlier attempt's hint still cools its route", policy: func(p *Policy) { p.Routes[1].MaxAttempts = 1 },
			hist: []Attempt{with(att(1, "A", rl, 1000), hint(20*time.Second)), att(2, "B", unav, 1300)},
			want: Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(1500)), JitterMS: 200}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, req := testPolicy(), testRequest()
			if tc.policy != nil {
				tc.policy(p)
			}
			if tc.req != nil {
				tc.req(req)
			}
			got, err := Decide(p, req, tc.hist, tc.adm)
			if err != nil {
				t.Fatal(err)
			}
			got.Reserve = 0
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A new request skips a cooling route as it skips an open breaker.
func TestStartSkipsACoolingRoute(t *testing.T) {
	at := func(ids ...string) Admission {
		adm := Admission{Cooling: map[string]time.Time{}}
		for _, id := range ids {
			adm.Cooling[id] = t0.Add(time.Second)
		}
		return adm
	}
	p := tieredPolicy(StrategyOrdered)
	for _, tc := range []struct {
		adm  Admission
		want string
	}{
		{Admission{}, "A"},
		{at("A"), "B"},
		{at("A", "B"), "C"},
		{at("A", "B", "C"), "A"}, // every route cools: as if none did
		{Admission{Cooling: map[string]time.Time{"A": t0}}, "A"}, // cooled until now: over
	} {
		if d := Start(p, testRequest(), tc.adm, t0); d.Route != tc.want || d.NotBefore != t0 {
			t.Errorf("cooling %v: %v, want %s at once", tc.adm.Cooling, d, tc.want)
		}
	}
}

func TestCoolsUntil(t *testing.T) {
	p := testPolicy()
	a := att(1, "A", gw.KindRateLimited, 1000)
	for _, tc := range []struct {
		kind    gw.Kind
		hint    time.Duration
		has     bool
		onRoute int
		want    bool
	}{
		{gw.KindRateLimited, 201 * time.Millisecond, true, 1, true},
		{gw.KindRateLimited, 200 * time.Millisecond, true, 1, false}, // no longer than the backoff
		{gw.KindRateLimited, 300 * time.Millisecond, true, 2, false}, // the next backoff is 400 ms
		{gw.KindRateLimited, 0, false, 1, false},
		{gw.KindUnavailable, time.Minute, true, 1, false},
	} {
		a.Kind, a.RetryAfter, a.HasRetryAfter = tc.kind, tc.hint, tc.has
		until, ok := CoolsUntil(p, &a, tc.onRoute)
		if ok != tc.want || ok && !until.Equal(a.ObservedAt.Add(tc.hint)) {
			t.Errorf("%s hint %v (%v) attempt %d: %v %v, want %v", tc.kind, tc.hint, tc.has, tc.onRoute, until, ok, tc.want)
		}
	}
}

// The engine never dispatches to a route that cools at the decision while
// another route of its tier may take the attempt and does not cool; and a
// hint no longer than the backoff decides as no hint would, but for the
// wait.
func TestPropertyCooling(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		req := genRequest(t, p)
		tr := simulate(t, p, req)
		for i, d := range tr.decisions {
			if !d.Dispatches() || i == 0 || d.Action == ActionResume {
				continue
			}
			hist, adm := tr.attempts[:i], tr.adms[i]
			last := deciding(hist)
			if last.Cause == gw.CauseContextLength {
				continue // a larger context, wherever it is
			}
			at := last.ObservedAt
			r := p.Route(d.Route)
			if coolUntil(p, adm, hist, r.ID, at).IsZero() {
				continue
			}
			for _, o := range inTier(p, p.tierOf(r), func(o *Route) bool { return o != r }) {
				ok, _ := candidate(p, hist, o, adm)
				if ok && req.eligible(o.ID) && adm.admits(o.ID) && routeAttempts(hist, o.ID) < o.MaxAttempts &&
					!silent(hist, o.ID) && coolUntil(p, adm, hist, o.ID, at).IsZero() {
					t.Fatalf("decision %d: %s to cooling route %s while %s of its tier may serve", i, d.Action, r.ID, o.ID)
				}
			}
		}
		// A short hint: the same route as without it.
		n := len(tr.attempts)
		if n == 0 || tr.attempts[n-1].Kind != gw.KindRateLimited || tr.attempts[n-1].Purpose == PurposeHedge {
			return
		}
		hist := append([]Attempt(nil), tr.attempts...)
		last := &hist[n-1]
		backoff := Backoff(p.BaseDelay, p.MaxDelay, routeAttempts(hist, last.Route)+1)
		last.HasRetryAfter, last.RetryAfter = true, time.Duration(rapid.Int64Range(0, int64(backoff)).Draw(t, "short_hint"))
		adm := tr.adms[n]
		adm.Cooling = nil
		with, err1 := Decide(p, req, hist, adm)
		last.HasRetryAfter, last.RetryAfter = false, 0
		without, err2 := Decide(p, req, hist, adm)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if with.Reason == gw.ReasonDeadline {
			return // the hint's wait reached the deadline
		}
		if with.Action != without.Action || with.Route != without.Route {
			t.Fatalf("a %v hint (backoff %v) decided %v; without it %v", last.RetryAfter, backoff, with, without)
		}
	})
}
