package retry

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// tieredPolicy: routes A and B share tier 0, C is tier 1; each route one
// attempt, three in all; A weighs 3, B 1.
func tieredPolicy(s Strategy) *Policy {
	p := testPolicy()
	p.MaxAttempts, p.Strategy, p.Tiered = 3, s, true
	for i, t := range []int{0, 0, 1} {
		p.Routes[i].Tier, p.Routes[i].MaxAttempts, p.Routes[i].Weight = t, 1, 1
		p.Routes[i].Provider = fmt.Sprintf("p%d", i)
	}
	p.Routes[0].Weight = 3
	return p
}

// share is how often Start picks each route over n requests.
func share(p *Policy, adm Admission, n int) map[string]float64 {
	got := map[string]float64{}
	for i := range n {
		req := testRequest()
		req.ID = fmt.Sprintf("req-%d", i)
		got[Start(p, req, adm, t0).Route]++
	}
	for k := range got {
		got[k] /= float64(n)
	}
	return got
}

func TestAWeightedTierSpreadsByWeight(t *testing.T) {
	got := share(tieredPolicy(StrategyWeighted), Admission{}, 10_000)
	if math.Abs(got["A"]-0.75) > 0.02 || math.Abs(got["B"]-0.25) > 0.02 || got["C"] != 0 {
		t.Fatalf("shares %v, want A 0.75, B 0.25 (±0.02), none for the next tier", got)
	}
	// A route its breaker refuses leaves the tier to the others.
	got = share(tieredPolicy(StrategyWeighted), Admission{Refused: map[string]bool{"A": true}}, 1000)
	if got["B"] != 1 {
		t.Fatalf("with A refused: %v", got)
	}
	// The whole tier refused: the next tier serves.
	got = share(tieredPolicy(StrategyWeighted), Admission{Refused: map[string]bool{"A": true, "B": true}}, 100)
	if got["C"] != 1 {
		t.Fatalf("with the first tier refused: %v", got)
	}
}

func TestStrategiesChooseByTheirFigures(t *testing.T) {
	figs := func(a, b Figures) Admission { return Admission{Figures: map[string]Figures{"A": a, "B": b}} }
	for _, tc := range []struct {
		name     string
		strategy Strategy
		adm      Admission
		wantA    float64 // A's share
		within   float64
	}{
		{"ordered takes the first", StrategyOrdered, Admission{}, 1, 0},
		{"least busy takes the idler", StrategyLeastBusy, figs(Figures{InFlight: 5}, Figures{InFlight: 1}), 0, 0},
		{"least busy ties spread by weight", StrategyLeastBusy, figs(Figures{InFlight: 2}, Figures{InFlight: 2}), 0.75, 0.03},
		{"latency takes the faster, exploring a tenth (half of it here)", StrategyLatency, figs(Figures{TTFT: 300 * time.Millisecond}, Figures{TTFT: 100 * time.Millisecond}), 0.05, 0.02},
		{"latency measures an unmeasured route first", StrategyLatency, figs(Figures{TTFT: 0}, Figures{TTFT: 100 * time.Millisecond}), 0.95, 0.02},
		{"quota takes the most headroom", StrategyQuota, figs(Figures{Headroom: 0.2}, Figures{Headroom: 0.6}), 0, 0},
		{"quota never picks a spent route while another has room", StrategyQuota, figs(Figures{Headroom: 0}, Figures{Headroom: 0.01}), 0, 0},
		{"quota with everything spent still answers", StrategyQuota, figs(Figures{Headroom: 0}, Figures{Headroom: 0}), 0.75, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := share(tieredPolicy(tc.strategy), tc.adm, 10_000)
			if math.Abs(got["A"]-tc.wantA) > tc.within {
				t.Fatalf("A's share %.3f, want %.3f ± %.2f (%v)", got["A"], tc.wantA, tc.within, got)
			}
		})
	}
}

// A retry of a failed attempt goes to another route of the same tier
// before the next tier; the same request replays to the same choices.
func TestARetryStaysInTheTierFirst(t *testing.T) {
	p, req := tieredPolicy(StrategyWeighted), testRequest()
	first := Start(p, req, Admission{}, t0)
	other := map[string]string{"A": "B", "B": "A"}[first.Route]
	d, err := Decide(p, req, []Attempt{att(1, first.Route, gw.KindUnavailable, 100)}, Admission{})
	if err != nil || d.Action != ActionFallback || d.Route != other || !d.NotBefore.Equal(t0.Add(ms(300))) {
		t.Fatalf("after %s failed: %+v %v, want a fallback to %s after base_delay", first.Route, d, err, other)
	}
	d, err = Decide(p, req, []Attempt{att(1, first.Route, gw.KindUnavailable, 100), att(2, other, gw.KindUnavailable, 400)}, Admission{})
	if err != nil || d.Route != "C" {
		t.Fatalf("with the tier spent: %+v %v, want the next tier", d, err)
	}
	if again := Start(p, req, Admission{}, t0); again != first {
		t.Fatalf("the same request chose %s, then %s", first.Route, again.Route)
	}
}

// A member of a weighted tier whose model is missing (route_unavailable)
// loses every request drawn to it to another member at once, and is not
// drawn again within the request.
func TestABrokenMemberOfAWeightedTierIsPassedOver(t *testing.T) {
	p := tieredPolicy(StrategyWeighted)
	p.MaxAttempts, p.Routes[0].MaxAttempts, p.Routes[1].MaxAttempts = 5, 2, 2
	drawn := 0
	for i := range 500 {
		req := testRequest()
		req.ID = fmt.Sprintf("req-%d", i)
		d := Start(p, req, Admission{}, t0)
		if d.Route != "A" {
			continue
		}
		drawn++
		hist := []Attempt{att(1, "A", gw.KindRouteUnavailable, 100)}
		d, err := Decide(p, req, hist, Admission{})
		if err != nil || d.Action != ActionFallback || d.Route != "B" || d.NotBefore != t0.Add(ms(300)) {
			t.Fatalf("%s after A was found broken: %v %v", req.ID, d, err)
		}
		// B fails too: its own retry, never A again.
		hist = append(hist, att(2, "B", gw.KindUnavailable, 400))
		if d, err = Decide(p, req, hist, Admission{}); err != nil || d.Route != "B" {
			t.Fatalf("%s after B failed: %v %v", req.ID, d, err)
		}
		// B's budget spent: the next tier, though A has attempts left.
		hist = append(hist, att(3, "B", gw.KindUnavailable, 700))
		if d, err = Decide(p, req, hist, Admission{}); err != nil || d.Route != "C" {
			t.Fatalf("%s after B failed twice: %v %v", req.ID, d, err)
		}
	}
	if drawn < 300 {
		t.Fatalf("A drawn %d times of 500; want about 375", drawn)
	}
}
