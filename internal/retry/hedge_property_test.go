package retry

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/gw"
)

// genPair draws how a hedged pair ended, as the gateway resolves it: the
// first to a decisive outcome wins and the other is cancelled as
// hedge_lost, unless both failed retryably on their own.
func genPair(t *rapid.T, d, h Decision, ordinal int) (Attempt, Attempt) {
	pa, ha := genOutcome(t, d, ordinal), genOutcome(t, h, ordinal+1)
	ha.JitterMS = 0
	if ha.StartedAt.Before(pa.StartedAt) {
		ha.StartedAt = pa.StartedAt
	}
	if ha.ObservedAt.Before(ha.StartedAt) {
		ha.ObservedAt = ha.StartedAt
	}
	switch rapid.IntRange(0, 2).Draw(t, "pair_end") {
	case 0: // the primary won
		ha.Kind, ha.Cause, ha.VisibleOutput, ha.EmittedTokens = gw.KindCancelled, gw.CauseHedgeLost, false, 0
	case 1: // the hedge won
		pa.Kind, pa.Cause, pa.VisibleOutput, pa.EmittedTokens = gw.KindCancelled, gw.CauseHedgeLost, false, 0
	default: // both failed before output
		for _, a := range []*Attempt{&pa, &ha} {
			a.Kind = retryableKinds[rapid.IntRange(0, len(retryableKinds)-1).Draw(t, "pair_kind")]
			a.VisibleOutput, a.EmittedTokens = false, 0
		}
	}
	return pa, ha
}

// Hedged runs keep every bound: attempts, per-route attempts, the cost cap
// and the tenant allowance count both members of a pair; no hedge follows
// visible output; and the same history replays to the same decisions.
func TestPropertyHedgedRunsKeepBudgets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		p.HedgeAfter = ms(50)
		req := genRequest(t, p)
		run := NewRun(p, req)
		adm := genAdmission(t, p)
		if rapid.Bool().Draw(t, "tenant_capped") {
			adm.TenantCapped, adm.TenantAllowance = true, gw.NanoUSD(rapid.Int64Range(0, 50_000_000).Draw(t, "allowance"))
		}
		d := run.Start(adm, t0)
		var hist []Attempt
		perRoute := map[string]int{}
		for d.Dispatches() {
			if adm.TenantCapped && d.Reserve > adm.TenantAllowance {
				t.Fatalf("reserve %d over the tenant allowance %d", d.Reserve, adm.TenantAllowance)
			}
			n := len(hist) + 1
			hadOutput := false
			for _, a := range hist {
				hadOutput = hadOutput || a.VisibleOutput
			}
			hedgeAdm := genAdmission(t, p)
			h, hedged := run.Hedge(hedgeAdm, d.NotBefore.Add(p.HedgeAfter))
			adm = genAdmission(t, p)
			var err error
			if hedged {
				if hadOutput {
					t.Fatal("hedged after visible output")
				}
				if h.Route == d.Route || hedgeAdm.Refused[h.Route] {
					t.Fatalf("hedge to %s (primary %s, refused %v)", h.Route, d.Route, hedgeAdm.Refused)
				}
				if p.MaxCost > 0 && spent(hist)+d.Reserve+h.Reserve > p.MaxCost {
					t.Fatal("a hedge over the cost cap")
				}
				pa, ha := genPair(t, d, h, n)
				hist = append(hist, pa, ha)
				d, err = run.ObservePair(pa, ha, adm)
			} else {
				a := genOutcome(t, d, n)
				hist = append(hist, a)
				d, err = run.Observe(a, adm)
			}
			if err != nil {
				t.Fatalf("observe: %v", err)
			}
			if len(hist) > p.MaxAttempts {
				t.Fatalf("%d attempts over max_attempts %d", len(hist), p.MaxAttempts)
			}
			for _, a := range hist[n-1:] {
				perRoute[a.Route]++
				if perRoute[a.Route] > p.Route(a.Route).MaxAttempts {
					t.Fatalf("route %s over its budget", a.Route)
				}
			}
			if p.MaxCost > 0 && spent(hist) > p.MaxCost {
				t.Fatalf("spent %d over the cost cap %d", spent(hist), p.MaxCost)
			}
			again, err := Decide(p, req, hist, adm)
			if err != nil || again != d {
				t.Fatalf("replayed to %v (%v), was %v", again, err, d)
			}
		}
	})
}
