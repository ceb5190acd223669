package retry

import (
	"errors"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
)

func hedgePolicy() *Policy {
	p := testPolicy()
	p.HedgeAfter = ms(50)
	return p
}

func TestHedgeDecision(t *testing.T) {
	primary := Decision{Action: ActionDispatch, Route: "A", NotBefore: t0, Reserve: 1}
	at := t0.Add(ms(50))
	tests := []struct {
		name    string
		policy  func(*Policy)
		req     func(*Request)
		hist    []Attempt
		primary Decision
		adm     Admission
		want    string // the hedge's route; "" for no hedge
	}{
		{name: "hedges to the next route", want: "B"},
		{name: "off when hedge.after is 0", policy: func(p *Policy) { p.HedgeAfter = 0 }},
		{name: "never for a stateful operation", req: func(r *Request) { r.Stateful = true }},
		{name: "skips an open route", adm: Admission{Refused: map[string]bool{"B": true}}, want: "C"},
		{name: "skips an ineligible route", req: func(r *Request) { r.Ineligible = map[string]string{"B": "no tools"} }, want: "C"},
		{name: "nothing after the last route", primary: Decision{Action: ActionFallback, Route: "C", NotBefore: t0}},
		{name: "a fallback is hedged past its own route", hist: []Attempt{att(1, "A", gw.KindUnavailable, 0), att(2, "A", gw.KindUnavailable, 0)},
			primary: Decision{Action: ActionFallback, Route: "B", NotBefore: t0}, want: "C"},
		{name: "the attempt budget must hold both", policy: func(p *Policy) { p.MaxAttempts = 1 }},
		{name: "the fleet retry budget counts the hedge", adm: Admission{RetryBudgetSpent: true}},
		{name: "past the deadline", req: func(r *Request) { r.Deadline = at }},
		{name: "never after visible output", hist: []Attempt{with(att(1, "A", gw.KindStreamInterruptedAfterOutput, 0), func(a *Attempt) { a.VisibleOutput = true })},
			primary: Decision{Action: ActionResume, Route: "A", NotBefore: t0}},
		{name: "a restart is not hedged", primary: Decision{Action: ActionRestart, Route: "B", NotBefore: t0}},
		{name: "the cost budget must hold both reservations", policy: func(p *Policy) { p.MaxCost = 2_500_000 }},
		{name: "the cost budget that holds both", policy: func(p *Policy) { p.MaxCost = 7_000_000 }, want: "B"},
		{name: "the tenant allowance must cover the hedge", adm: Admission{TenantCapped: true, TenantAllowance: 2_000_000}},
		{name: "the tenant allowance that covers it", adm: Admission{TenantCapped: true, TenantAllowance: 3_000_000}, want: "B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, req := hedgePolicy(), testRequest()
			if tc.policy != nil {
				tc.policy(p)
			}
			if tc.req != nil {
				tc.req(req)
			}
			pd := primary
			if tc.primary.Action != "" {
				pd = tc.primary
			}
			if pd.Reserve == 0 {
				pd.Reserve = reservation(p, p.Route(pd.Route), req, 0)
			}
			d, ok := Hedge(p, req, tc.hist, pd, tc.adm, at)
			switch {
			case tc.want == "" && ok:
				t.Fatalf("hedged to %s, want no hedge", d.Route)
			case tc.want != "" && !ok:
				t.Fatalf("no hedge, want one to %s", tc.want)
			case ok && (d.Route != tc.want || d.Action != ActionHedge || !d.NotBefore.Equal(at) || d.Purpose() != PurposeHedge):
				t.Fatalf("got %+v, want a hedge to %s at %v", d, tc.want, at)
			}
		})
	}
}

func TestDecideAfterAHedgedPair(t *testing.T) {
	lost := func(a *Attempt) { a.Kind, a.Cause = gw.KindCancelled, gw.CauseHedgeLost }
	hedge := func(a *Attempt) { a.Purpose = PurposeHedge }
	tests := []struct {
		name string
		hist []Attempt
		want Decision
	}{
		{name: "the hedge won", hist: []Attempt{with(att(1, "A", gw.KindOK, 600), lost), with(att(2, "B", gw.KindOK, 500), hedge)},
			want: Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
		{name: "the primary won", hist: []Attempt{att(1, "A", gw.KindOK, 500), with(with(att(2, "B", gw.KindOK, 510), hedge), lost)},
			want: Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
		{name: "the winner's refusal is not shopped around", hist: []Attempt{att(1, "A", gw.KindPolicyDenied, 300), with(with(att(2, "B", gw.KindOK, 310), hedge), lost)},
			want: stop(gw.TerminalRejected, gw.ReasonNonRetryable)},
		{name: "both failed: the one observed last decides", hist: []Attempt{att(1, "A", gw.KindUnavailable, 300), with(att(2, "B", gw.KindUnavailable, 200), hedge)},
			want: Decision{Action: ActionRetry, Route: "A", NotBefore: t0.Add(ms(500)), JitterMS: 200}},
		{name: "both failed, hedge last", hist: []Attempt{att(1, "A", gw.KindUnavailable, 100), with(att(2, "B", gw.KindUnavailable, 200), hedge)},
			want: Decision{Action: ActionRetry, Route: "B", NotBefore: t0.Add(ms(400)), JitterMS: 200}},
		{name: "an answer beats a failure observed at the same instant", hist: []Attempt{att(1, "A", gw.KindOK, 300), with(att(2, "B", gw.KindUnavailable, 300), hedge)},
			want: Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
		{name: "a primary that failed first does not decide", hist: []Attempt{att(1, "A", gw.KindUnavailable, 100), with(att(2, "B", gw.KindOK, 400), hedge)},
			want: Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}},
		{name: "the winner broke after output: resume on its own route", hist: []Attempt{with(att(1, "A", gw.KindOK, 100), lost),
			with(with(att(2, "C", gw.KindStreamInterruptedAfterOutput, 400), hedge), func(a *Attempt) { a.VisibleOutput, a.EmittedTokens = true, 10 })},
			want: Decision{Action: ActionResume, Route: "C", NotBefore: t0.Add(ms(400))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, req := hedgePolicy(), testRequest()
			got, err := Decide(p, req, tc.hist, Admission{})
			if err != nil {
				t.Fatal(err)
			}
			got.Reserve = 0
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// A pair that ended the request leaves nothing to follow it.
	p, req := hedgePolicy(), testRequest()
	hist := []Attempt{att(1, "A", gw.KindOK, 500), with(with(att(2, "B", gw.KindOK, 510), hedge), lost), att(3, "A", gw.KindOK, 900)}
	if _, err := Decide(p, req, hist, Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("an attempt after a won pair: %v", err)
	}
}

func TestRunHedgedPair(t *testing.T) {
	p, req := hedgePolicy(), testRequest()
	run := NewRun(p, req)
	d := run.Start(Admission{}, t0)
	h, ok := run.Hedge(Admission{}, t0.Add(ms(50)))
	if !ok || h.Route != "B" {
		t.Fatalf("hedge: %+v %v", h, ok)
	}
	if _, ok := run.Hedge(Admission{}, t0.Add(ms(60))); ok {
		t.Fatal("a second hedge of the same attempt")
	}
	pa := Attempt{Ordinal: 1, Route: d.Route, StartedAt: t0, ObservedAt: t0.Add(ms(300)), Kind: gw.KindCancelled, Cause: gw.CauseHedgeLost}
	ha := Attempt{Ordinal: 2, Route: "B", Purpose: PurposeHedge, StartedAt: t0.Add(ms(50)), ObservedAt: t0.Add(ms(290)), Kind: gw.KindOK}
	if _, err := run.Observe(pa, Admission{}); !errors.Is(err, ErrUnexpectedAttempt) {
		t.Fatalf("observing half a pair: %v", err)
	}
	bad := ha
	bad.StartedAt = t0.Add(ms(40))
	if _, err := run.ObservePair(pa, bad, Admission{}); !errors.Is(err, ErrUnexpectedAttempt) {
		t.Fatalf("a hedge before its not_before: %v", err)
	}
	got, err := run.ObservePair(pa, ha, Admission{})
	if err != nil || got.Action != ActionComplete {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestRedecideUnderATighterAdmission(t *testing.T) {
	p, req := testPolicy(), testRequest()
	run := NewRun(p, req)
	if d := run.Start(Admission{}, t0); d.Route != "A" {
		t.Fatalf("start: %+v", d)
	}
	// A concurrent request took A's last half-open probe.
	d, err := run.Redecide(Admission{Refused: map[string]bool{"A": true}})
	if err != nil || d.Route != "B" || !d.NotBefore.Equal(t0) {
		t.Fatalf("redecided start: %+v %v", d, err)
	}
	a := Attempt{Ordinal: 1, Route: "B", StartedAt: t0, ObservedAt: t0.Add(ms(100)), Kind: gw.KindUnavailable}
	if d, err = run.Observe(a, Admission{}); err != nil || d.Route != "B" {
		t.Fatalf("observe: %+v %v", d, err)
	}
	// ... and another the fleet's last retry.
	if d, err = run.Redecide(Admission{RetryBudgetSpent: true}); err != nil || d.Reason != gw.ReasonRetryBudget {
		t.Fatalf("redecided retry: %+v %v", d, err)
	}
	if _, err := run.Redecide(Admission{}); !errors.Is(err, ErrAfterTerminal) {
		t.Fatalf("redecide after a terminal: %v", err)
	}
}

func TestTenantAllowanceBindsLikeACostBudget(t *testing.T) {
	p, req := testPolicy(), testRequest()
	full := reservation(p, p.Route("A"), req, 0)
	d := Start(p, req, Admission{TenantCapped: true, TenantAllowance: full - 1}, t0)
	if d.Reason != gw.ReasonCostBudget || !d.TenantBound {
		t.Fatalf("start over the allowance: %+v", d)
	}
	if d := Start(p, req, Admission{TenantCapped: true, TenantAllowance: full}, t0); d.Action != ActionDispatch {
		t.Fatalf("start at the allowance: %+v", d)
	}
	p.MaxCost = 1
	if d := Start(p, req, Admission{TenantCapped: true, TenantAllowance: 0}, t0); d.TenantBound {
		t.Fatalf("the request's own cap binds first: %+v", d)
	}
	p.MaxCost = 0
	hist := []Attempt{att(1, "A", gw.KindUnavailable, 100)}
	d, err := Decide(p, req, hist, Admission{TenantCapped: true, TenantAllowance: full / 2})
	if err != nil || d.Reason != gw.ReasonCostBudget || !d.TenantBound || d.Terminal != gw.TerminalExhausted {
		t.Fatalf("retry over the allowance: %+v %v", d, err)
	}
}
