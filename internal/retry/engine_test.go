package retry

import (
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// testPolicy: three routes A (8k context, prefill), B (32k, none), C (200k,
// prefix flag); two attempts each; five in total; seed 001's backoff.
func testPolicy() *Policy {
	price := gw.PriceFromPerMTok(1, 2)
	return &Policy{Digest: "test-policy", MaxAttempts: 5, BaseDelay: ms(200), MaxDelay: ms(1500),
		RetryAfterCap: 5 * time.Second, Jitter: JitterNone, Deadline: time.Minute,
		AfterOutput: AfterOutputResume, RestartMaxTokens: 40,
		Routes: []Route{
			{ID: "A", MaxAttempts: 2, MaxContextTokens: 8000, MaxOutputTokens: 1000, Price: price, Continuation: ContinuationPrefill},
			{ID: "B", MaxAttempts: 2, MaxContextTokens: 32000, MaxOutputTokens: 1000, Price: price, Continuation: ContinuationNone},
			{ID: "C", MaxAttempts: 2, MaxContextTokens: 200000, MaxOutputTokens: 1000, Price: price, Continuation: ContinuationPrefixFlag},
		}}
}

// providers sets the providers of routes A, B and C.
func providers(a, b, c string) func(*Policy) {
	return func(p *Policy) { p.Routes[0].Provider, p.Routes[1].Provider, p.Routes[2].Provider = a, b, c }
}

func testRequest() *Request {
	return &Request{ID: "req-1", Deadline: t0.Add(time.Minute), InputTokens: 1000}
}

// att builds an observed attempt on route observed at t0+at.
func att(ordinal int, route string, kind gw.Kind, at int) Attempt {
	return Attempt{Ordinal: ordinal, Route: route, Kind: kind, StartedAt: t0.Add(ms(at - 50)), ObservedAt: t0.Add(ms(at))}
}

func with(a Attempt, f func(*Attempt)) Attempt { f(&a); return a }

func TestDecideTable(t *testing.T) {
	const (
		ok   = gw.KindOK
		tbr  = gw.KindTimeoutBeforeResponse
		rl   = gw.KindRateLimited
		unav = gw.KindUnavailable
	)
	hint := func(d time.Duration) func(*Attempt) {
		return func(a *Attempt) { a.RetryAfter, a.HasRetryAfter = d, true }
	}
	cause := func(c gw.Cause) func(*Attempt) { return func(a *Attempt) { a.Cause = c } }
	broke := func(tokens int64) func(*Attempt) {
		return func(a *Attempt) {
			a.Kind, a.VisibleOutput, a.EmittedTokens = gw.KindStreamInterruptedAfterOutput, true, tokens
		}
	}
	resumed := func(a *Attempt) { a.Purpose = PurposeResume }
	same := func(p *Policy) { p.ResumeRoutes = ResumeSame }
	tests := []struct {
		name   string
		policy func(*Policy)
		req    func(*Request)
		adm    Admission
		hist   []Attempt
		want   Decision
	}{
		// docs/retries.md, one row each.
		{name: "success completes", hist: []Attempt{att(1, "A", ok, 900)},
			want: Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
		{name: "timeout before response retries same route after base", hist: []Attempt{att(1, "A", tbr, 1000)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1200)), JitterMS: 200}},
		{name: "rate limited honours a larger Retry-After", hist: []Attempt{with(att(1, "A", rl, 1100), hint(ms(250)))},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1350)), JitterMS: 200}},
		{name: "rate limited hint below backoff changes nothing", hist: []Attempt{with(att(1, "A", rl, 1100), hint(ms(50)))},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1300)), JitterMS: 200}},
		{name: "Retry-After above the cap is capped on the only route", policy: func(p *Policy) { p.Routes = p.Routes[:1] },
			hist: []Attempt{with(att(1, "A", rl, 1000), hint(time.Hour))},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(6000)), JitterMS: 200}},
		{name: "Retry-After above the cap moves to the next tier at once", hist: []Attempt{with(att(1, "A", rl, 1000), hint(time.Hour))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(1200)), JitterMS: 200}},
		{name: "unavailable retries same route", hist: []Attempt{att(1, "A", unav, 500)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(700)), JitterMS: 200}},
		{name: "rejected stops", hist: []Attempt{att(1, "A", gw.KindRejected, 500)},
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "policy denied never falls back", hist: []Attempt{att(1, "A", gw.KindPolicyDenied, 500)},
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "invalid request stops", hist: []Attempt{att(1, "A", gw.KindInvalidRequest, 500)},
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "protocol violation stops", hist: []Attempt{att(1, "A", gw.KindProtocolViolation, 500)},
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "unknown provider acceptance is indeterminate", hist: []Attempt{att(1, "A", gw.KindUnknownProviderAcceptance, 500)},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "stream interrupted with stop mode", policy: func(p *Policy) { p.AfterOutput = AfterOutputStop },
			hist: []Attempt{with(att(1, "A", ok, 500), broke(400))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "cancelled ends the request", hist: []Attempt{att(1, "A", gw.KindCancelled, 500)},
			want: stop(gw.TerminalCancelled, gw.ReasonCancelled)},

		// The refinements of docs/retries.md.
		{name: "first-byte timeout moves to the next route at once", hist: []Attempt{with(att(1, "A", tbr, 30000), cause(gw.CauseFirstByteTimeout))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(30200)), JitterMS: 200}},
		{name: "context length falls back to a larger context", hist: []Attempt{with(att(1, "A", gw.KindRejected, 300), cause(gw.CauseContextLength))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(500)), JitterMS: 200}},
		{name: "context length skips routes that are not larger",
			policy: func(p *Policy) { p.Routes[1].MaxContextTokens = 8000 },
			hist:   []Attempt{with(att(1, "A", gw.KindRejected, 300), cause(gw.CauseContextLength))},
			want:   Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(500)), JitterMS: 200}},
		{name: "context length on the largest route stops",
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400), with(att(3, "C", gw.KindRejected, 900), cause(gw.CauseContextLength))},
			req:  func(r *Request) { r.Ineligible = map[string]string{"B": "test"} },
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},

		// Backoff grows per route and resets on a new route.
		{name: "route budget spent falls back after base", hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(600)), JitterMS: 200}},
		{name: "third attempt on a route waits 2×base", policy: func(p *Policy) { p.Routes[0].MaxAttempts = 3 },
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(800)), JitterMS: 400}},

		// After visible output (docs/streaming.md).
		{name: "resume continues on the same route at once", hist: []Attempt{with(att(1, "A", ok, 5000), broke(400))},
			want: Decision{Action: ActionResume, Route: "A", NotBefore: t0.Add(ms(5000))}},
		{name: "resume impossible without continuation", policy: same,
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400), with(att(3, "B", ok, 5000), broke(400))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "a route without continuation hands on to the next that has it",
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400), with(att(3, "B", ok, 5000), broke(400))},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(5000))}},
		{name: "resume impossible inside a tool call", hist: []Attempt{with(with(att(1, "A", ok, 5000), broke(12)), func(a *Attempt) { a.InToolCall = true })},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "resume blocked by the route budget", policy: same, hist: []Attempt{att(1, "A", unav, 100), with(att(2, "A", ok, 5000), broke(400))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonRouteBudget)},
		{name: "a route out of attempts hands on", hist: []Attempt{att(1, "A", unav, 100), with(att(2, "A", ok, 5000), broke(400))},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(5000))}},
		{name: "a failed continuation stops when only the same route may continue", policy: same,
			hist: []Attempt{with(att(1, "A", ok, 5000), broke(400)), with(att(2, "A", gw.KindRejected, 5100), resumed)},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "after a reset the same route once, then the next",
			hist: []Attempt{with(att(1, "A", ok, 5000), broke(400)), with(att(2, "A", gw.KindRejected, 5100), resumed)},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(5100))}},
		{name: "a continuation that broke again hands on too",
			hist: []Attempt{with(att(1, "A", ok, 5000), broke(400)), with(with(att(2, "A", ok, 6000), broke(30)), resumed)},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(6000))}},
		{name: "a stall moves on at once", hist: []Attempt{with(with(att(1, "A", ok, 5000), broke(400)), cause(gw.CauseStall))},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(5000))}},
		{name: "a stall with no other route that can continue stays on its route",
			policy: func(p *Policy) { p.Routes[2].Continuation = ContinuationNone },
			hist:   []Attempt{with(with(att(1, "A", ok, 5000), broke(400)), cause(gw.CauseStall))},
			want:   Decision{Action: ActionResume, Route: "A", NotBefore: t0.Add(ms(5000))}},
		{name: "a stall with nowhere to go stops",
			policy: func(p *Policy) { p.Routes[2].Continuation = ContinuationNone },
			hist:   []Attempt{att(1, "A", unav, 100), with(with(att(2, "A", ok, 5000), broke(400)), cause(gw.CauseStall))},
			want:   stop(gw.TerminalIndeterminate, gw.ReasonRoutesExhausted)},
		{name: "a stall with the next route's breaker open stops", adm: Admission{Refused: map[string]bool{"A": true, "C": true}},
			hist: []Attempt{with(with(att(1, "A", ok, 5000), broke(400)), cause(gw.CauseStall))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonCircuitOpen)},
		{name: "a stall hands on only to a route that may serve the request", req: func(r *Request) { r.Ineligible = map[string]string{"C": "data boundary"} },
			hist: []Attempt{att(1, "A", unav, 100), with(with(att(2, "A", ok, 5000), broke(400)), cause(gw.CauseStall))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonRoutesExhausted)},
		{name: "a failed continuation with nowhere to go stops",
			policy: func(p *Policy) { p.Routes[2].Continuation = ContinuationNone },
			hist:   []Attempt{with(att(1, "A", ok, 5000), broke(400)), with(att(2, "A", gw.KindRejected, 5100), resumed)},
			want:   stop(gw.TerminalIndeterminate, gw.ReasonRoutesExhausted)},
		{name: "a continuation that broke inside a tool call stops",
			hist: []Attempt{with(att(1, "A", ok, 5000), broke(400)), with(with(with(att(2, "A", ok, 6000), broke(30)), resumed), func(a *Attempt) { a.InToolCall = true })},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "restart for an opted-in client under the token limit", policy: func(p *Policy) { p.AfterOutput = AfterOutputRestart },
			req:  func(r *Request) { r.AcceptRestart = true },
			hist: []Attempt{with(att(1, "A", ok, 900), broke(12))},
			want: Decision{Action: ActionRestart, Route: "A", NotBefore: t0.Add(ms(1100)), JitterMS: 200}},
		{name: "no restart without the opt-in header", policy: func(p *Policy) { p.AfterOutput = AfterOutputRestart },
			hist: []Attempt{with(att(1, "A", ok, 900), broke(12))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},
		{name: "no restart past restart_max_tokens", policy: func(p *Policy) { p.AfterOutput = AfterOutputRestart },
			req:  func(r *Request) { r.AcceptRestart = true },
			hist: []Attempt{with(att(1, "A", ok, 900), broke(40))},
			want: stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)},

		// docs/retries.md, every stop reason.
		{name: "attempt budget", policy: func(p *Policy) { p.MaxAttempts = 2 },
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want: stop(gw.TerminalExhausted, gw.ReasonAttemptBudget)},
		{name: "route budget on a single-route alias", policy: func(p *Policy) { p.Routes = p.Routes[:1] },
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want: stop(gw.TerminalExhausted, gw.ReasonRouteBudget)},
		{name: "routes exhausted", policy: func(p *Policy) { p.MaxAttempts = 9 },
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400), att(3, "B", unav, 700), att(4, "B", unav, 1000), att(5, "C", unav, 1300), att(6, "C", unav, 1600)},
			want: stop(gw.TerminalExhausted, gw.ReasonRoutesExhausted)},
		{name: "cost budget", policy: func(p *Policy) { p.MaxCost = gw.NanoFromUSD(0.0035) },
			hist: []Attempt{with(att(1, "A", unav, 100), func(a *Attempt) { a.Cost = gw.NanoFromUSD(0.001) })},
			want: stop(gw.TerminalExhausted, gw.ReasonCostBudget)},
		{name: "deadline before not_before", req: func(r *Request) { r.Deadline = t0.Add(ms(1200)) },
			hist: []Attempt{att(1, "A", unav, 1000)},
			want: stop(gw.TerminalDeadline, gw.ReasonDeadline)},
		{name: "not_before exactly at the deadline stops", req: func(r *Request) { r.Deadline = t0.Add(ms(1200)) },
			hist: []Attempt{att(1, "A", tbr, 1000)},
			want: stop(gw.TerminalDeadline, gw.ReasonDeadline)},
		{name: "success at the deadline loses to it", req: func(r *Request) { r.Deadline = t0.Add(ms(900)) },
			hist: []Attempt{att(1, "A", ok, 900)},
			want: stop(gw.TerminalDeadline, gw.ReasonDeadline)},
		{name: "circuit open on every remaining route", adm: Admission{Refused: map[string]bool{"A": true, "B": true, "C": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: stop(gw.TerminalExhausted, gw.ReasonCircuitOpen)},
		{name: "an open breaker on the same route falls back", adm: Admission{Refused: map[string]bool{"A": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "fleet retry budget spent", adm: Admission{RetryBudgetSpent: true},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: stop(gw.TerminalExhausted, gw.ReasonRetryBudget)},
		// The retry budget is a provider's, and a refused account is the
		// route's (docs/overload.md, docs/retries.md).
		{name: "a provider's spent retry budget sends the retry to another provider", policy: providers("a", "b", "c"),
			adm:  Admission{RetryRefused: map[string]bool{"a": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "a first attempt on another provider is no retry there", policy: providers("a", "b", "c"),
			adm:  Admission{RetryRefused: map[string]bool{"a": true, "b": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "a retry on a tried provider with its budget spent is skipped", policy: providers("a", "a", "c"),
			adm:  Admission{RetryRefused: map[string]bool{"a": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "every route a retry on a spent provider stops", policy: providers("a", "a", "a"),
			adm:  Admission{RetryRefused: map[string]bool{"a": true}},
			hist: []Attempt{att(1, "A", unav, 100)},
			want: stop(gw.TerminalExhausted, gw.ReasonRetryBudget)},
		{name: "a refused account moves on at once, past routes on the same account", policy: providers("a", "a", "c"),
			hist: []Attempt{with(att(1, "A", gw.KindAccountRefused, 100), cause(gw.CauseUpstreamAuth))},
			want: Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "an exhausted quota is a refused account too", policy: providers("a", "b", "c"),
			hist: []Attempt{with(att(1, "A", gw.KindAccountRefused, 100), cause(gw.CauseQuota))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "no route on another account stops", policy: providers("a", "a", "a"),
			hist: []Attempt{with(att(1, "A", gw.KindAccountRefused, 100), cause(gw.CauseUpstreamAuth))},
			want: stop(gw.TerminalExhausted, gw.ReasonRoutesExhausted)},
		// A broken route (its model or deployment missing) is the route's
		// own fault: never that route again, the next one at once — on the
		// same provider too, since only the route is broken.
		{name: "a broken route moves on at once, to the same provider's next route", policy: providers("a", "a", "c"),
			hist: []Attempt{att(1, "A", gw.KindRouteUnavailable, 100)},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "a broken route is not retried whatever its budget",
			policy: func(p *Policy) { p.Routes[0].MaxAttempts = 4 },
			hist:   []Attempt{att(1, "A", gw.KindRouteUnavailable, 100)},
			want:   Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "a broken route is not come back to after the others fail",
			policy: func(p *Policy) { p.MaxAttempts = 9 },
			hist: []Attempt{att(1, "A", gw.KindRouteUnavailable, 100), att(2, "B", unav, 400), att(3, "B", unav, 700),
				att(4, "C", unav, 1000), att(5, "C", unav, 1300)},
			want: stop(gw.TerminalExhausted, gw.ReasonRoutesExhausted)},
		{name: "every route broken stops", hist: []Attempt{att(1, "A", gw.KindRouteUnavailable, 100),
			att(2, "B", gw.KindRouteUnavailable, 400), att(3, "C", gw.KindRouteUnavailable, 700)},
			want: stop(gw.TerminalExhausted, gw.ReasonRoutesExhausted)},
		{name: "a broken route under a 429 hint still moves on at once",
			hist: []Attempt{with(att(1, "A", gw.KindRouteUnavailable, 100), hint(4*time.Second))},
			want: Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(300)), JitterMS: 200}},
		{name: "the last attempt goes to a provider not tried yet",
			policy: func(p *Policy) { providers("a", "b", "c")(p); p.MaxAttempts, p.Routes[0].MaxAttempts = 3, 3 },
			hist:   []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want:   Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(600)), JitterMS: 200}},
		{name: "the last attempt stays with the only provider",
			policy: func(p *Policy) { providers("a", "a", "a")(p); p.MaxAttempts, p.Routes[0].MaxAttempts = 3, 3 },
			hist:   []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want:   Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(800)), JitterMS: 400}},
		{name: "a resume on the broken stream's provider is a retry there", policy: providers("a", "b", "c"),
			adm:  Admission{RetryRefused: map[string]bool{"a": true}},
			hist: []Attempt{with(att(1, "A", ok, 5000), broke(400))},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(5000))}},
		{name: "ineligible routes are skipped in fallback", req: func(r *Request) { r.Ineligible = map[string]string{"B": "no image input"} },
			hist: []Attempt{att(1, "A", unav, 100), att(2, "A", unav, 400)},
			want: Decision{Action: ActionFallback, Route: "C", NotBefore: t0.Add(ms(600)), JitterMS: 200}},
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

func TestStart(t *testing.T) {
	tests := []struct {
		name string
		req  func(*Request)
		adm  Admission
		cost gw.NanoUSD
		want Decision
	}{
		{name: "first route", want: Decision{Action: ActionDispatch, Route: "A", NotBefore: t0}},
		{name: "ineligible primary is skipped", req: func(r *Request) { r.Ineligible = map[string]string{"A": "no image input"} },
			want: Decision{Action: ActionDispatch, Route: "B", NotBefore: t0}},
		{name: "open primary is skipped", adm: Admission{Refused: map[string]bool{"A": true}},
			want: Decision{Action: ActionDispatch, Route: "B", NotBefore: t0}},
		{name: "every breaker open: no upstream call", adm: Admission{Refused: map[string]bool{"A": true, "B": true, "C": true}},
			want: stop(gw.TerminalExhausted, gw.ReasonCircuitOpen)},
		{name: "no route can serve", req: func(r *Request) { r.Ineligible = map[string]string{"A": "x", "B": "x", "C": "x"} },
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "first reservation over the cost budget", cost: 1,
			want: stop(gw.TerminalExhausted, gw.ReasonCostBudget)},
		{name: "already past the deadline", req: func(r *Request) { r.Deadline = t0 },
			want: stop(gw.TerminalDeadline, gw.ReasonDeadline)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, req := testPolicy(), testRequest()
			p.MaxCost = tc.cost
			if tc.req != nil {
				tc.req(req)
			}
			got := Start(p, req, tc.adm, t0)
			got.Reserve = 0
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestReservationIsWorstCase(t *testing.T) {
	p, req := testPolicy(), testRequest()
	d := Start(p, req, Admission{}, t0)
	// 1,000 prompt tokens at $1/MTok + 1,000 output tokens (route max) at $2/MTok.
	if want := gw.NanoFromUSD(0.001 + 0.002); d.Reserve != want {
		t.Fatalf("reserve %d, want %d", d.Reserve, want)
	}
	req.MaxOutputTokens = 100
	if d := Start(p, req, Admission{}, t0); d.Reserve != gw.NanoFromUSD(0.001+0.0002) {
		t.Fatalf("max_tokens must lower the reservation, got %d", d.Reserve)
	}
}

// Seed 001: base 200 ms, max 1,500 ms → 200, 400, 800, 1,500, 1,500; a
// 1,200 ms hint raises the second wait to 1,200 ms.
func TestBackoffSeed001(t *testing.T) {
	want := []time.Duration{ms(200), ms(400), ms(800), ms(1500), ms(1500)}
	for i, w := range want {
		if got := Backoff(ms(200), ms(1500), i+2); got != w {
			t.Errorf("k=%d: %v, want %v", i+2, got, w)
		}
	}
	if got := Backoff(ms(200), ms(1500), 1000); got != ms(1500) {
		t.Errorf("huge k must cap, got %v", got)
	}
	p, req := testPolicy(), testRequest()
	p.Routes[0].MaxAttempts = 5
	hist := []Attempt{att(1, "A", gw.KindUnavailable, 100),
		with(att(2, "A", gw.KindRateLimited, 500), func(a *Attempt) { a.RetryAfter, a.HasRetryAfter = ms(1200), true })}
	d, err := Decide(p, req, hist, Admission{})
	if err != nil {
		t.Fatal(err)
	}
	if wait := d.NotBefore.Sub(t0.Add(ms(500))); wait != ms(1200) {
		t.Fatalf("second wait %v, want 1.2s", wait)
	}
}

func TestSeed001ReferenceSequence(t *testing.T) {
	p := testPolicy()
	p.Routes = p.Routes[:2]
	req := testRequest()
	run := NewRun(p, req)
	d := run.Start(Admission{}, t0)
	steps := []struct {
		kind  gw.Kind
		start int
		at    int
		hint  time.Duration
		want  Decision
	}{
		{gw.KindRateLimited, 0, 1100, ms(250), Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(1350)), JitterMS: 200}},
		{gw.KindUnavailable, 1350, 1450, 0, Decision{Action: ActionFallback, Route: "B", NotBefore: t0.Add(ms(1650)), JitterMS: 200}},
		{gw.KindOK, 1650, 4000, 0, Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
	}
	for i, s := range steps {
		a := Attempt{Ordinal: i + 1, Route: d.Route, Kind: s.kind, StartedAt: t0.Add(ms(s.start)), ObservedAt: t0.Add(ms(s.at))}
		if s.hint > 0 {
			a.RetryAfter, a.HasRetryAfter = s.hint, true
		}
		var err error
		if d, err = run.Observe(a, Admission{}); err != nil {
			t.Fatal(err)
		}
		d.Reserve = 0
		if d != s.want {
			t.Fatalf("step %d: got %+v, want %+v", i+1, d, s.want)
		}
	}
}

func TestRunRefusesWhatWasNotDecided(t *testing.T) {
	p, req := testPolicy(), testRequest()
	run := NewRun(p, req)
	if _, err := run.Observe(att(1, "A", gw.KindOK, 10), Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("observe before start: %v", err)
	}
	run.Start(Admission{}, t0)
	if _, err := run.Observe(att(1, "B", gw.KindOK, 100), Admission{}); !errors.Is(err, ErrUnexpectedAttempt) {
		t.Fatalf("wrong route: %v", err)
	}
	if _, err := run.Observe(att(2, "A", gw.KindOK, 100), Admission{}); !errors.Is(err, ErrUnexpectedAttempt) {
		t.Fatalf("wrong ordinal: %v", err)
	}
	d, err := run.Observe(att(1, "A", gw.KindUnavailable, 100), Admission{})
	if err != nil {
		t.Fatal(err)
	}
	early := att(2, "A", gw.KindOK, 200)
	early.StartedAt = d.NotBefore.Add(-time.Millisecond)
	if _, err := run.Observe(early, Admission{}); !errors.Is(err, ErrUnexpectedAttempt) {
		t.Fatalf("early attempt: %v", err)
	}
	okA := att(2, "A", gw.KindOK, 400)
	okA.StartedAt = d.NotBefore
	if _, err := run.Observe(okA, Admission{}); err != nil {
		t.Fatal(err)
	}
	if !run.Done() {
		t.Fatal("run should be done after success")
	}
	if _, err := run.Observe(att(3, "A", gw.KindOK, 900), Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("attempt after terminal: %v", err)
	}
}

func TestDecideRejectsHistoryPastATerminal(t *testing.T) {
	p, req := testPolicy(), testRequest()
	hist := []Attempt{att(1, "A", gw.KindRejected, 100), att(2, "A", gw.KindOK, 500)}
	if _, err := Decide(p, req, hist, Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("got %v", err)
	}
	if _, err := Decide(p, req, nil, Admission{}); !errors.Is(err, ErrNoAttempts) {
		t.Fatalf("got %v", err)
	}
}

func TestFullJitterIsSeededAndBounded(t *testing.T) {
	seen := map[int64]bool{}
	for ord := 1; ord <= 200; ord++ {
		a := SampleJitterMS(ms(800), "digest", "req", ord)
		if a < 0 || a > 800 {
			t.Fatalf("ordinal %d: %d outside [0, 800]", ord, a)
		}
		if b := SampleJitterMS(ms(800), "digest", "req", ord); a != b {
			t.Fatalf("ordinal %d: not replayable (%d vs %d)", ord, a, b)
		}
		seen[a] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct samples in 200: not uniform", len(seen))
	}
	if SampleJitterMS(ms(800), "digest", "req-a", 2) == SampleJitterMS(ms(800), "digest", "req-b", 2) &&
		SampleJitterMS(ms(800), "digest", "req-a", 3) == SampleJitterMS(ms(800), "digest", "req-b", 3) {
		t.Fatal("different requests should not share a schedule")
	}
	if got := SampleJitterMS(0, "d", "r", 1); got != 0 {
		t.Fatalf("zero backoff jitter %d", got)
	}
}

func TestDeadlineTakesTheEarliestBudget(t *testing.T) {
	if got := Deadline(t0, time.Minute, 700*time.Millisecond, 0, 30*time.Second); got != t0.Add(700*time.Millisecond) {
		t.Fatalf("got %v", got)
	}
	if got := Deadline(t0, time.Minute); got != t0.Add(time.Minute) {
		t.Fatalf("got %v", got)
	}
}

func TestKindClasses(t *testing.T) {
	want := map[gw.Kind]gw.Class{
		gw.KindOK: gw.ClassSuccess, gw.KindTimeoutBeforeResponse: gw.ClassRetryable, gw.KindRateLimited: gw.ClassRetryable,
		gw.KindUnavailable: gw.ClassRetryable, gw.KindRejected: gw.ClassNonRetryable, gw.KindPolicyDenied: gw.ClassNonRetryable,
		gw.KindInvalidRequest: gw.ClassNonRetryable, gw.KindProtocolViolation: gw.ClassNonRetryable,
		gw.KindUnknownProviderAcceptance: gw.ClassIndeterminate, gw.KindStreamInterruptedAfterOutput: gw.ClassIndeterminate,
		gw.KindCancelled: gw.ClassNonRetryable, gw.Kind("made_up"): gw.ClassNonRetryable,
	}
	for k, c := range want {
		if k.Class() != c {
			t.Errorf("%s: class %s, want %s", k, k.Class(), c)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	p, req := testPolicy(), testRequest()
	p.Jitter = JitterFull
	hist := []Attempt{with(att(1, "A", gw.KindRateLimited, 1100), func(a *Attempt) { a.RetryAfter, a.HasRetryAfter = ms(250), true }),
		att(2, "A", gw.KindUnavailable, 1450)}
	b.ReportAllocs()
	for b.Loop() {
		if d := decide(p, req, hist, Admission{}); !d.Dispatches() {
			b.Fatal(d)
		}
	}
}

func BenchmarkRunThreeAttempts(b *testing.B) {
	p, req := testPolicy(), testRequest()
	p.Jitter = JitterFull
	b.ReportAllocs()
	for b.Loop() {
		run := NewRun(p, req)
		d := run.Start(Admission{}, t0)
		for i, k := range []gw.Kind{gw.KindRateLimited, gw.KindUnavailable, gw.KindOK} {
			a := Attempt{Ordinal: i + 1, Route: d.Route, Kind: k, StartedAt: d.NotBefore, ObservedAt: d.NotBefore.Add(ms(100))}
			var err error
			if d, err = run.Observe(a, Admission{}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
