package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/policy"
)

func parse(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("fleet.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fleetPolicy(t testing.TB) *policy.Policy { return parse(t, Fleet) }

// smallConfig is the CI simulation: 10 replicas, 10,000 users over five
// minutes, a provider with room for 1.5 times the load that fails
// completely for a minute, then is browned out for half a minute.
func smallConfig(t testing.TB, stack Stack) Config {
	return Config{Stack: stack, Replicas: 10, Users: 10_000, Arrivals: 300 * time.Second, Horizon: 330 * time.Second,
		Provider: Provider{Capacity: 50, OutageStart: 60 * time.Second, OutageEnd: 120 * time.Second, BrownoutEnd: 150 * time.Second,
			BrownoutFailure: 0.3, Latency: 800 * time.Millisecond, FailLatency: 50 * time.Millisecond},
		Policy: fleetPolicy(t), Patience: 60 * time.Second, PriceUSD: 0.002, Seed: 1}
}

func run(t testing.TB, cfg Config) *Result {
	t.Helper()
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func small(t testing.TB, stack Stack) *Result { return run(t, smallConfig(t, stack)) }

// smallWithFallback is the CI simulation with six times the users (so
// that the retry budget's floor, 10 retries a second, is a small share of
// the primary's load, as in a real fleet, and the budget's ratio binds)
// and a fallback route on a second provider that stays healthy and has
// the same room; the primary route takes at most primaryAttempts of the
// three attempts.
func smallWithFallback(t testing.TB, primaryAttempts int) *Result {
	cfg := smallConfig(t, Oncegate)
	cfg.Users, cfg.Provider.Capacity = 60_000, 300
	cfg.Policy = parse(t, FleetWithFallback(primaryAttempts))
	cfg.Fallback = &Provider{Capacity: 300, Latency: 800 * time.Millisecond, FailLatency: 50 * time.Millisecond}
	return run(t, cfg)
}

func TestOncegateKeepsAnOutageFromMultiplyingAndRecoversWithinOpenFor(t *testing.T) {
	og, naive := small(t, Oncegate), small(t, Naive)
	t.Logf("oncegate: %d actions, %d calls, %.2f calls/action in the outage, %.2f after, recovery %v, %d ok, %d failed, %d missed, $%.2f",
		og.Actions, og.Calls, og.CallsPerActionOutage, og.CallsPerActionAfter, og.Recovery, og.Succeeded, og.Failed, og.Missed, og.SpendUSD)
	t.Logf("naive:    %d actions, %d calls, %.2f calls/action in the outage, %.2f after, recovery %v, %d ok, %d failed, %d missed, $%.2f",
		naive.Actions, naive.Calls, naive.CallsPerActionOutage, naive.CallsPerActionAfter, naive.Recovery, naive.Succeeded, naive.Failed, naive.Missed, naive.SpendUSD)
	if og.CallsPerActionOutage > 1.1 {
		t.Errorf("oncegate: %.2f upstream calls per user action during the outage; want ≤ 1.1", og.CallsPerActionOutage)
	}
	if og.Recovery < 0 || og.Recovery > 30*time.Second {
		t.Errorf("oncegate recovered %v after the provider's return; want within one open_for (30s)", og.Recovery)
	}
	if naive.CallsPerActionOutage < 10 {
		t.Errorf("the naive stack made only %.2f calls per action in the outage: the model lost its retries", naive.CallsPerActionOutage)
	}
}

func TestTheSameConfigGivesTheSameResult(t *testing.T) {
	a, b := small(t, Oncegate), small(t, Oncegate)
	if a.Calls != b.Calls || a.Succeeded != b.Succeeded || a.Recovery != b.Recovery || a.SpendUSD != b.SpendUSD {
		t.Fatalf("two runs differ: %d/%d calls, %d/%d answered, %v/%v recovery", a.Calls, b.Calls, a.Succeeded, b.Succeeded, a.Recovery, b.Recovery)
	}
}

// With a healthy fallback on a second provider, an outage and a brown-out
// of the primary cost the users (almost) nothing, and the primary still
// sees no more than its retry budget: (1 + ratio) × the actions that
// reach it, plus the budget's floor (min_per_second over the brown-out
// and the one window before it).
func TestAFallbackProviderAnswersThroughTheOutageWithinThePrimarysBudget(t *testing.T) {
	r := smallWithFallback(t, 2)
	b, rb := r.Brownout, r.Config.Policy.RetryBudget
	floor := rb.MinPerSecond * (r.Config.Provider.BrownoutEnd - r.Config.Provider.OutageEnd + rb.Window.D()).Seconds()
	bound := 1 + rb.Ratio + floor/float64(b.PrimaryActions)
	t.Logf("outage: %d actions, %.2f%% answered, %d calls (%d on the primary); brown-out: %d actions, %.2f%% answered, %d calls, %d on the primary by %d actions (%.3f each, bound %.3f)",
		r.Outage.Actions, 100*r.Outage.SuccessRate(), r.Outage.Calls, r.Outage.PrimaryCalls,
		b.Actions, 100*b.SuccessRate(), b.Calls, b.PrimaryCalls, b.PrimaryActions, b.PrimaryAmplification(), bound)
	if got := r.Outage.SuccessRate(); got < 0.99 {
		t.Errorf("%.2f%% of the actions in the outage answered; want ≥ 99%% with a healthy fallback", 100*got)
	}
	if got := b.SuccessRate(); got < 0.99 {
		t.Errorf("%.2f%% of the actions in the brown-out answered; want ≥ 99%% with a healthy fallback", 100*got)
	}
	if b.PrimaryActions < b.Actions/2 {
		t.Fatalf("only %d of the brown-out's %d actions reached the primary: its breaker kept it shut, and its budget was not tested", b.PrimaryActions, b.Actions)
	}
	if got := b.PrimaryAmplification(); got > bound {
		t.Errorf("the primary took %.2f calls per action that reached it in the brown-out; want ≤ %.2f (1 + ratio + the floor)", got, bound)
	}
}

func TestASecondProviderNeedsItsSimulatedFallback(t *testing.T) {
	cfg := smallConfig(t, Oncegate)
	cfg.Policy = parse(t, FleetWithFallback(2))
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "Config.Fallback") {
		t.Fatalf("Run with a route on a second provider and no Fallback: %v; want an error naming Config.Fallback", err)
	}
}
