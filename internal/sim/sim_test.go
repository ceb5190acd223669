package sim

import (
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/policy"
)

func fleetPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("fleet.yaml", []byte(Fleet))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// small is the CI simulation: 10 replicas, 10,000 users over five
// minutes, a provider with room for 1.5 times the load that fails
// completely for a minute, then is browned out for half a minute.
func small(t testing.TB, stack Stack) *Result {
	t.Helper()
	r, err := Run(Config{Stack: stack, Replicas: 10, Users: 10_000, Arrivals: 300 * time.Second, Horizon: 330 * time.Second,
		Provider: Provider{Capacity: 50, OutageStart: 60 * time.Second, OutageEnd: 120 * time.Second, BrownoutEnd: 150 * time.Second,
			BrownoutFailure: 0.3, Latency: 800 * time.Millisecond, FailLatency: 50 * time.Millisecond},
		Policy: fleetPolicy(t), Patience: 60 * time.Second, PriceUSD: 0.002, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r
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
