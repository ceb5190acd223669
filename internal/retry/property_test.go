package retry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/gw"
)

// genPolicy draws a random valid policy with 1–4 routes.
func genPolicy(t *rapid.T) *Policy {
	n := rapid.IntRange(1, 4).Draw(t, "routes")
	base := ms(rapid.IntRange(0, 500).Draw(t, "base_ms"))
	p := &Policy{Digest: rapid.StringMatching(`[a-f0-9]{8}`).Draw(t, "digest"),
		MaxAttempts: rapid.IntRange(1, 8).Draw(t, "max_attempts"), BaseDelay: base,
		MaxDelay:         base + ms(rapid.IntRange(0, 3000).Draw(t, "extra_ms")),
		RetryAfterCap:    ms(rapid.IntRange(0, 5000).Draw(t, "cap_ms")),
		Jitter:           rapid.SampledFrom([]Jitter{JitterFull, JitterNone}).Draw(t, "jitter"),
		Deadline:         time.Minute,
		AfterOutput:      rapid.SampledFrom([]AfterOutput{AfterOutputResume, AfterOutputRestart, AfterOutputStop}).Draw(t, "after_output"),
		RestartMaxTokens: int64(rapid.IntRange(0, 60).Draw(t, "restart_max")),
		ResumeRoutes:     rapid.SampledFrom([]ResumeRoutes{ResumeAny, ResumeSame}).Draw(t, "resume_routes"),
	}
	for i := 0; i < n; i++ {
		p.Routes = append(p.Routes, Route{ID: fmt.Sprintf("r%d", i), Provider: rapid.SampledFrom([]string{"p0", "p1", "p2"}).Draw(t, "provider"),
			MaxAttempts:      rapid.IntRange(1, 3).Draw(t, "route_max"),
			MaxContextTokens: int64(rapid.IntRange(1000, 200000).Draw(t, "ctx")), MaxOutputTokens: 1000,
			Price:        gw.Price{InputPerToken: gw.NanoUSD(rapid.IntRange(0, 5000).Draw(t, "in")), OutputPerToken: gw.NanoUSD(rapid.IntRange(0, 20000).Draw(t, "out"))},
			Continuation: rapid.SampledFrom([]Continuation{ContinuationNone, ContinuationPrefill, ContinuationPrefixFlag}).Draw(t, "cont")})
	}
	if rapid.Bool().Draw(t, "tiered") {
		// Tiers of consecutive routes, sharing load by a strategy.
		p.Tiered = true
		p.Strategy = rapid.SampledFrom([]Strategy{StrategyOrdered, StrategyWeighted, StrategyLeastBusy, StrategyLatency, StrategyQuota}).Draw(t, "strategy")
		tier := 0
		for i := range p.Routes {
			if i > 0 && rapid.Bool().Draw(t, "new_tier") {
				tier++
			}
			p.Routes[i].Tier, p.Routes[i].Weight = tier, rapid.IntRange(1, 5).Draw(t, "weight")
		}
	}
	if rapid.Bool().Draw(t, "cost_cap") {
		// Between one and eight worst-case reservations of the priciest
		// route, so that the cap binds somewhere in the middle of a run.
		var worst gw.NanoUSD
		for _, r := range p.Routes {
			worst = max(worst, r.Price.WorstCase(5000, r.MaxOutputTokens))
		}
		p.MaxCost = max(1, gw.NanoUSD(rapid.Int64Range(int64(worst)+1, 8*int64(worst)+1).Draw(t, "max_cost")))
	}
	return p
}

func genRequest(t *rapid.T, p *Policy) *Request {
	req := &Request{ID: rapid.StringMatching(`req-[0-9]{4}`).Draw(t, "id"),
		Deadline:      t0.Add(rapid.SampledFrom([]time.Duration{time.Minute, 10 * time.Second, 3 * time.Second, 500 * time.Millisecond}).Draw(t, "deadline") + ms(rapid.IntRange(0, 1000).Draw(t, "deadline_ms"))),
		InputTokens:   int64(rapid.IntRange(0, 5000).Draw(t, "input_tokens")),
		AcceptRestart: rapid.Bool().Draw(t, "accept_restart"), Ineligible: map[string]string{},
		NoContinuation: rapid.IntRange(0, 4).Draw(t, "no_continuation") == 0}
	for _, r := range p.Routes {
		if rapid.IntRange(0, 9).Draw(t, "ineligible") == 0 {
			req.Ineligible[r.ID] = "test"
		}
	}
	return req
}

var (
	retryableKinds = []gw.Kind{gw.KindTimeoutBeforeResponse, gw.KindRateLimited, gw.KindUnavailable, gw.KindAccountRefused,
		gw.KindRouteUnavailable}
	otherKinds = []gw.Kind{gw.KindOK, gw.KindStreamInterruptedAfterOutput, gw.KindRejected, gw.KindPolicyDenied,
		gw.KindInvalidRequest, gw.KindProtocolViolation, gw.KindUnknownProviderAcceptance, gw.KindCancelled}
)

// genKind favours retryable failures (70 %) so that runs are long enough to
// reach every budget; the rest covers every other kind.
func genKind(t *rapid.T) gw.Kind {
	if rapid.IntRange(0, 9).Draw(t, "retryable") < 7 {
		return retryableKinds[rapid.IntRange(0, len(retryableKinds)-1).Draw(t, "rkind")]
	}
	return otherKinds[rapid.IntRange(0, len(otherKinds)-1).Draw(t, "okind")]
}

// genOutcome draws what happened to an attempt scheduled by d.
func genOutcome(t *rapid.T, d Decision, ordinal int) Attempt {
	start := d.NotBefore.Add(ms(rapid.IntRange(0, 50).Draw(t, "lag")))
	a := Attempt{Ordinal: ordinal, Route: d.Route, Purpose: d.Purpose(), NotBefore: d.NotBefore, JitterMS: d.JitterMS,
		StartedAt: start, ObservedAt: start.Add(ms(rapid.IntRange(0, 3000).Draw(t, "duration"))),
		Kind:  genKind(t),
		Cause: rapid.SampledFrom([]gw.Cause{"", "", "", gw.CauseFirstByteTimeout, gw.CauseContextLength, gw.CauseStall}).Draw(t, "cause"),
		Cost:  gw.NanoUSD(rapid.Int64Range(0, int64(d.Reserve)).Draw(t, "cost"))}
	if rapid.Bool().Draw(t, "has_hint") {
		a.HasRetryAfter, a.RetryAfter = true, ms(rapid.IntRange(0, 10000).Draw(t, "hint"))
	}
	if a.Kind == gw.KindStreamInterruptedAfterOutput {
		a.VisibleOutput, a.EmittedTokens = true, int64(rapid.IntRange(1, 500).Draw(t, "emitted"))
		a.InToolCall = rapid.IntRange(0, 5).Draw(t, "tool") == 0
	}
	return a
}

func genAdmission(t *rapid.T, p *Policy) Admission {
	adm := Admission{RetryBudgetSpent: rapid.IntRange(0, 29).Draw(t, "budget_spent") == 0, Refused: map[string]bool{}, RetryRefused: map[string]bool{}}
	for _, r := range p.Routes {
		if rapid.IntRange(0, 14).Draw(t, "refused") == 0 {
			adm.Refused[r.ID] = true
		}
		if rapid.IntRange(0, 9).Draw(t, "retry_refused") == 0 {
			adm.RetryRefused[r.Provider] = true
		}
		if rapid.IntRange(0, 3).Draw(t, "cooling") == 0 {
			if adm.Cooling == nil {
				adm.Cooling = map[string]time.Time{}
			}
			adm.Cooling[r.ID] = t0.Add(ms(rapid.IntRange(0, 20000).Draw(t, "cool_ms")))
		}
		if rapid.Bool().Draw(t, "figures") {
			if adm.Figures == nil {
				adm.Figures = map[string]Figures{}
			}
			adm.Figures[r.ID] = Figures{InFlight: rapid.IntRange(0, 50).Draw(t, "in_flight"),
				TTFT:     ms(rapid.IntRange(0, 2000).Draw(t, "ttft_ms")),
				Headroom: float64(rapid.IntRange(0, 10).Draw(t, "headroom")) / 10}
		}
	}
	return adm
}

type trace struct {
	attempts  []Attempt
	decisions []Decision
	adms      []Admission
}

func simulate(t *rapid.T, p *Policy, req *Request) trace {
	var tr trace
	run := NewRun(p, req)
	adm := genAdmission(t, p)
	d := run.Start(adm, t0)
	tr.adms, tr.decisions = append(tr.adms, adm), append(tr.decisions, d)
	for d.Dispatches() {
		a := genOutcome(t, d, len(tr.attempts)+1)
		adm = genAdmission(t, p)
		var err error
		if d, err = run.Observe(a, adm); err != nil {
			t.Fatalf("observe the decided attempt: %v", err)
		}
		tr.attempts, tr.adms, tr.decisions = append(tr.attempts, a), append(tr.adms, adm), append(tr.decisions, d)
	}
	if _, err := run.Observe(genOutcome(t, Decision{Route: p.Routes[0].ID, NotBefore: t0}, len(tr.attempts)+1), Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("an attempt after the terminal was accepted: %v", err)
	}
	return tr
}

func TestPropertyEngineBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		req := genRequest(t, p)
		tr := simulate(t, p, req)
		perRoute := map[string]int{}
		var spentBefore gw.NanoUSD
		lastIndex := -1
		for i, d := range tr.decisions {
			if !d.Dispatches() {
				if i != len(tr.decisions)-1 {
					t.Fatalf("terminal decision %d is not the last", i)
				}
				break
			}
			if !d.NotBefore.Before(req.Deadline) {
				t.Fatalf("attempt scheduled at %v, at or after the deadline %v", d.NotBefore, req.Deadline)
			}
			if _, out := req.Ineligible[d.Route]; out {
				t.Fatalf("dispatch to ineligible route %s", d.Route)
			}
			if tr.adms[i].Refused[d.Route] {
				t.Fatalf("dispatch to route %s whose breaker refused", d.Route)
			}
			idx := p.index(d.Route)
			if idx >= 0 {
				idx = p.tierOf(&p.Routes[idx]) // the tier never goes back (with no tiers: the index)
			}
			if idx < 0 || idx < lastIndex {
				t.Fatalf("route %s out of priority order (tier %d after %d)", d.Route, idx, lastIndex)
			}
			lastIndex = idx
			if d.Action == ActionResume {
				prev := tr.attempts[i-1]
				switch {
				case p.Route(d.Route).Continuation == ContinuationNone:
					t.Fatalf("continuation on route %s, which cannot continue", d.Route)
				case prev.InToolCall:
					t.Fatal("continuation of a stream broken inside a tool call")
				case req.NoContinuation:
					t.Fatal("continuation of an answer that cannot be continued")
				case p.ResumeRoutes == ResumeSame && d.Route != prev.Route:
					t.Fatalf("continuation moved from %s to %s with resume_routes same", prev.Route, d.Route)
				case prev.Purpose == PurposeResume && p.ResumeRoutes == ResumeAny && d.Route == prev.Route:
					t.Fatalf("a failed continuation on %s continued on the same route", d.Route)
				}
			}
			perRoute[d.Route]++
			if perRoute[d.Route] > p.Route(d.Route).MaxAttempts {
				t.Fatalf("route %s over its budget", d.Route)
			}
			if i+1 > p.MaxAttempts {
				t.Fatalf("attempt %d over max_attempts %d", i+1, p.MaxAttempts)
			}
			if p.MaxCost > 0 && spentBefore+d.Reserve > p.MaxCost {
				t.Fatalf("reservation %d + spent %d over max cost %d", d.Reserve, spentBefore, p.MaxCost)
			}
			if i > 0 && tried(p, tr.attempts[:i], p.Route(d.Route).Provider) && !tr.adms[i].retries(p.Route(d.Route).Provider) {
				t.Fatalf("a retry on provider %s admitted with its budget spent", p.Route(d.Route).Provider)
			}
			if i > 0 && accountRefused(p, tr.attempts[:i], p.Route(d.Route).Provider) {
				t.Fatalf("attempt %d on provider %s, whose account the request found refused", i+1, p.Route(d.Route).Provider)
			}
			for j := range i {
				if a := tr.attempts[j]; a.Kind == gw.KindRouteUnavailable && a.Route == d.Route {
					t.Fatalf("attempt %d on route %s, which attempt %d found broken", i+1, d.Route, j+1)
				}
			}
			if i < len(tr.attempts) {
				spentBefore += tr.attempts[i].Cost
			}
		}
		if p.MaxCost > 0 && spentBefore > p.MaxCost {
			t.Fatalf("spent %d over max cost %d", spentBefore, p.MaxCost)
		}
	})
}

func TestPropertySameSeedReplays(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		req := genRequest(t, p)
		tr := simulate(t, p, req)
		if again := Start(p, req, tr.adms[0], t0); again != tr.decisions[0] {
			t.Fatalf("start replayed to %v, was %v", again, tr.decisions[0])
		}
		for i := range tr.attempts {
			again, err := Decide(p, req, tr.attempts[:i+1], tr.adms[i+1])
			if err != nil {
				t.Fatal(err)
			}
			if again != tr.decisions[i+1] {
				t.Fatalf("decision %d replayed to %v, was %v", i+1, again, tr.decisions[i+1])
			}
			if i+1 < len(tr.attempts) {
				a := tr.attempts[i+1]
				lo, hi := JitterInterval(p.Jitter, max(p.MaxDelay, p.BaseDelay))
				if a.Purpose != PurposeResume && (a.JitterMS < lo || a.JitterMS > hi) && p.Jitter == JitterFull {
					t.Fatalf("jitter %d outside [%d, %d]", a.JitterMS, lo, hi)
				}
			}
		}
	})
}
