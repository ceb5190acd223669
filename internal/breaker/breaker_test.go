package breaker

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{FailureRatio: 0.5, MinRequests: 4, Window: 10 * time.Second, OpenFor: 30 * time.Second, HalfOpenProbes: 2}
}

func record(t *testing.T, b *Breaker, o Outcome) {
	t.Helper()
	tk, ok := b.Acquire()
	if !ok {
		t.Fatalf("refused while recording %v", o)
	}
	b.Done(tk, o)
}

func wantState(t *testing.T, b *Breaker, want State, gen int64) {
	t.Helper()
	if s, g := b.State(); s != want || g != gen {
		t.Fatalf("state %v gen %d, want %v gen %d", s, g, want, gen)
	}
}

func TestBreakerOpensOnlyAfterMinRequestsAtTheRatio(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk)
	for range 3 {
		record(t, b, Failure)
	}
	wantState(t, b, Closed, 1) // 3 < min_requests, however bad
	record(t, b, Success)
	wantState(t, b, Open, 2) // 3 of 4 failed ≥ 0.5
	if b.Allows() {
		t.Fatal("an open breaker allows")
	}
	if _, ok := b.Acquire(); ok {
		t.Fatal("an open breaker admitted an attempt")
	}
}

func TestBreakerStaysClosedBelowTheRatio(t *testing.T) {
	b := New(testConfig(), clock.NewFake(t0))
	for _, o := range []Outcome{Failure, Success, Success, Success, Failure, Success, Success} {
		record(t, b, o)
	}
	wantState(t, b, Closed, 1) // 2 of 7
	for range 10 {
		record(t, b, Ignore) // a cancelled attempt says nothing
	}
	wantState(t, b, Closed, 1)
}

func TestBreakerForgetsOutsideItsWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk)
	for range 3 {
		record(t, b, Failure)
	}
	clk.Advance(11 * time.Second) // those failures aged out
	record(t, b, Failure)
	wantState(t, b, Closed, 1)
	for range 3 {
		record(t, b, Success)
	}
	wantState(t, b, Closed, 1)
}

func TestBreakerHalfOpenAdmitsAtMostItsProbes(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk)
	for range 4 {
		record(t, b, Failure)
	}
	wantState(t, b, Open, 2)
	clk.Advance(30*time.Second - time.Nanosecond)
	if b.Allows() {
		t.Fatal("allowed before open_for passed")
	}
	clk.Advance(time.Nanosecond)
	wantState(t, b, HalfOpen, 3)
	p1, ok1 := b.Acquire()
	p2, ok2 := b.Acquire()
	if !ok1 || !ok2 || p1.State != HalfOpen || p1.Generation != 3 {
		t.Fatalf("probes: %+v %v, %+v %v", p1, ok1, p2, ok2)
	}
	if b.Allows() {
		t.Fatal("a third probe would be admitted")
	}
	if _, ok := b.Acquire(); ok {
		t.Fatal("admitted a third probe")
	}
	b.Done(p1, Ignore) // the caller left: its slot is free again
	p3, ok := b.Acquire()
	if !ok {
		t.Fatal("a released probe slot was not reusable")
	}
	b.Done(p3, Success)
	wantState(t, b, Closed, 4)
	b.Done(p2, Failure) // of the half-open generation: stale now
	wantState(t, b, Closed, 4)
}

func TestProbeVerdictsFollowTheFailureRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio           float64
		probes          int
		failAt, closeAt int
	}{
		{0.5, 1, 1, 1}, {0.5, 2, 1, 1}, {0.5, 3, 2, 1}, {0.5, 4, 2, 1},
		{0.1, 3, 1, 1}, {1, 3, 3, 1}, {0.34, 3, 2, 1}, {0.5, 0, 1, 1},
	} {
		failAt, closeAt := ProbeVerdicts(Config{FailureRatio: tc.ratio, HalfOpenProbes: tc.probes})
		if failAt != tc.failAt || closeAt != tc.closeAt {
			t.Errorf("ratio %v, %d probes: fail at %d, close at %d; want %d, %d", tc.ratio, tc.probes, failAt, closeAt, tc.failAt, tc.closeAt)
		}
	}
}

// With three probes at ratio 0.5 one failure among them does not
// re-open a half-open breaker, two do, and the first success closes it.
func TestThreeProbesDecideByTwo(t *testing.T) {
	cfg := testConfig()
	cfg.HalfOpenProbes = 3
	for _, tc := range []struct {
		outcomes []Outcome
		want     State
	}{
		{[]Outcome{Failure, Success, Success}, Closed},
		{[]Outcome{Failure, Failure, Success}, Open},
		{[]Outcome{Failure, Failure}, Open},
		{[]Outcome{Success, Ignore, Success}, Closed},
	} {
		clk := clock.NewFake(t0)
		b := New(cfg, clk)
		for range 4 {
			record(t, b, Failure)
		}
		clk.Advance(30 * time.Second)
		var tickets []Ticket
		for range tc.outcomes {
			p, ok := b.Acquire()
			if !ok {
				t.Fatalf("%v: probe refused", tc.outcomes)
			}
			tickets = append(tickets, p)
		}
		for i, o := range tc.outcomes {
			b.Done(tickets[i], o)
		}
		if st, _ := b.State(); st != tc.want {
			t.Errorf("probes %v: %v, want %v", tc.outcomes, st, tc.want)
		}
	}
}

func TestBreakerFailedProbeReopens(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk)
	for range 4 {
		record(t, b, Failure)
	}
	clk.Advance(30 * time.Second)
	p, ok := b.Acquire()
	if !ok {
		t.Fatal("no probe")
	}
	b.Done(p, Failure)
	wantState(t, b, Open, 4)
	clk.Advance(29 * time.Second)
	if b.Allows() {
		t.Fatal("re-opened breaker allows before a fresh open_for")
	}
	clk.Advance(time.Second)
	wantState(t, b, HalfOpen, 5)
}

func TestBreakerIgnoresStaleOutcomes(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk)
	late, _ := b.Acquire() // admitted while closed, generation 1
	for range 4 {
		record(t, b, Failure)
	}
	clk.Advance(30 * time.Second)
	wantState(t, b, HalfOpen, 3)
	b.Done(late, Success) // a generation-1 success cannot close a half-open breaker
	wantState(t, b, HalfOpen, 3)
}

func TestSetAdmitsUnknownRoutes(t *testing.T) {
	s := NewSet(testConfig(), clock.NewFake(t0), []string{"a", "b", "a"})
	if !s.Allows("zzz") {
		t.Fatal("unknown route refused")
	}
	var seen []string
	s.States(func(r string, st State, gen int64) { seen = append(seen, r+"="+st.String()) })
	if len(seen) != 2 || seen[0] != "a=closed" || seen[1] != "b=closed" {
		t.Fatalf("states: %v", seen)
	}
}

// Any sequence of admissions, outcomes and clock moves keeps the breaker's
// promises: an open breaker admits nothing, a half-open one never has more
// than half_open_probes probes in flight, generations only grow, and the
// only transitions are closed→open, open→half-open, half-open→closed|open.
func TestPropertyBreakerInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{FailureRatio: rapid.Float64Range(0.01, 1).Draw(t, "ratio"), MinRequests: rapid.IntRange(1, 10).Draw(t, "min"),
			Window: 10 * time.Second, OpenFor: time.Duration(rapid.IntRange(1, 30).Draw(t, "open_s")) * time.Second,
			HalfOpenProbes: rapid.IntRange(1, 4).Draw(t, "probes")}
		clk := clock.NewFake(t0)
		b := New(cfg, clk)
		var held []Ticket
		prevState, prevGen := b.State()
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0:
				allows := b.Allows()
				tk, ok := b.Acquire()
				if ok != allows {
					t.Fatalf("Allows %v but Acquire %v", allows, ok)
				}
				if ok {
					if tk.State == Open {
						t.Fatal("admitted while open")
					}
					held = append(held, tk)
				}
			case 1, 2:
				if len(held) > 0 {
					i := rapid.IntRange(0, len(held)-1).Draw(t, "which")
					b.Done(held[i], Outcome(rapid.IntRange(0, 2).Draw(t, "outcome")))
					held = append(held[:i], held[i+1:]...)
				}
			case 3:
				clk.Advance(time.Duration(rapid.IntRange(0, 20).Draw(t, "advance_s")) * time.Second)
			}
			st, gen := b.State()
			if gen < prevGen {
				t.Fatalf("generation went back from %d to %d", prevGen, gen)
			}
			if gen != prevGen {
				allowed := map[[2]State]bool{{Closed, Open}: true, {Open, HalfOpen}: true, {HalfOpen, Closed}: true, {HalfOpen, Open}: true,
					{Open, Closed}: false}
				// Several transitions may happen between two looks (open →
				// half-open → open) only through allowed steps; one step
				// must be allowed.
				if gen == prevGen+1 && !allowed[[2]State{prevState, st}] {
					t.Fatalf("transition %v → %v", prevState, st)
				}
			}
			probes := 0
			for _, h := range held {
				if h.probe && h.Generation == gen && st == HalfOpen {
					probes++
				}
			}
			if probes > cfg.HalfOpenProbes {
				t.Fatalf("%d probes in flight, at most %d", probes, cfg.HalfOpenProbes)
			}
			prevState, prevGen = st, gen
		}
	})
}

// The hot path of every attempt: a snapshot, an admission, an outcome.
func BenchmarkBreakerAttempt(b *testing.B) {
	s := NewSet(testConfig(), clock.System{}, []string{"primary", "fallback"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = s.Allows("primary") && s.Allows("fallback")
			t, _ := s.Acquire("primary")
			s.Done("primary", t, Success)
		}
	})
}

// Failures that come back before the answers of the attempts admitted
// with them do not open a breaker on their own: the attempts in flight
// count as not failed until they are in.
func TestFastFailuresDoNotOpenABreakerAheadOfTheAnswers(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(testConfig(), clk) // min_requests 4, failure_ratio 0.5
	var tickets []Ticket
	for range 10 {
		tk, ok := b.Acquire()
		if !ok {
			t.Fatal("a closed breaker refused")
		}
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets[:4] {
		b.Done(tk, Failure) // 4 failures in, 6 attempts still out
	}
	wantState(t, b, Closed, 1)
	for _, tk := range tickets[4:] {
		b.Done(tk, Success)
	}
	wantState(t, b, Closed, 1)
	// When nothing else is out, failures open it as soon as they are
	// half of the window (4 + 2 of 12).
	for range 2 {
		record(t, b, Failure)
	}
	wantState(t, b, Open, 2)
}

func TestOpensCountsTheAttemptsInFlight(t *testing.T) {
	cfg := Config{FailureRatio: 0.5, MinRequests: 20}
	for _, tc := range []struct {
		ok, failed, inflight int64
		want                 bool
	}{
		{0, 20, 0, true}, {0, 19, 0, false}, {0, 20, 280, false}, {10, 20, 10, true}, {10, 20, 11, false}, {0, 20, -3, true},
	} {
		if got := Opens(cfg, tc.ok, tc.failed, tc.inflight); got != tc.want {
			t.Errorf("Opens(ok %d, failed %d, in flight %d) = %v", tc.ok, tc.failed, tc.inflight, got)
		}
	}
}
