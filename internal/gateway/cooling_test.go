package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// A long Retry-After cools its route down (docs/retries.md). These tests
// drive the gateway with the official OpenAI SDK at its default settings
// in a synctest bubble, so that the waits are fake time: what they assert
// is the receipts' schedule and the mocks' exact call counts.

// coolingConfig adds the aliases these tests use: a tier of two routes
// (east, west), the same routes as tiers of their own (primary, fallback),
// and those with a backoff longer than a short hint. retry_after_cap is
// the default's 5 s.
var coolingConfig = strings.Replace(testConfig, "models:\n", `models:
  - name: cool-tier
    routes: [[east, west]]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 5s, jitter: none, deadline: 60s}
  - name: cool-next
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 5s, jitter: none, deadline: 60s}
  - name: cool-slow
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 2s, max_delay: 4s, retry_after_cap: 5s, jitter: none, deadline: 60s}
`, 1)

// ask sends one chat completion to alias through the official SDK and
// returns its receipt (verified) and how long it took, in the bubble's
// fake time.
func (e *env) ask(alias, text string) (*receipt.Receipt, time.Duration) {
	e.t.Helper()
	var h http.Header
	start := time.Now()
	c := e.openai(&h)
	res, err := c.Chat.Completions.New(context.Background(), oaParams(alias, text))
	took := time.Since(start)
	if err != nil || res.Choices[0].Message.Content != answer(e.t, provider.OpenAI, text, 4) {
		e.t.Fatalf("%s: %v %v", alias, res, err)
	}
	return e.receipt(h.Get("X-Oncegate-Request-Id")), took
}

func throttled(retryAfter string) mock.Fault {
	return mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: retryAfter}
}

// routes lists the routes of a receipt's attempts.
func routes(r *receipt.Receipt) string {
	var out []string
	for _, a := range r.Attempts {
		out = append(out, a.Route)
	}
	return strings.Join(out, ",")
}

// The drill: the first route of a tier answers 429 with Retry-After: 20,
// the second is healthy. The request moves to the second at once — its
// receipt shows the fallback, base_delay after the 429, and the cooling
// until the 429 + 20 s — and a request arriving meanwhile goes straight to
// the second route without an attempt on the first. When the cooling ends
// the first route serves again.
func TestALongRetryAfterCoolsTheRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, config: coolingConfig}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(first(1, throttled("20"))))
		r, took := e.ask("cool-tier", "one")
		if routes(r) != "east,west" || r.Attempts[0].Kind != string(gw.KindRateLimited) || *r.Attempts[0].RetryAfterMS != 20_000 {
			t.Fatalf("attempts on %s: %+v", routes(r), r.Attempts)
		}
		a1, d1 := r.Attempts[0], r.Decisions[1]
		until := a1.ObservedAt.Add(20 * time.Second)
		if d1.Action != "fallback" || d1.Route != "west" || !d1.NotBefore.Equal(a1.ObservedAt.Add(20*time.Millisecond)) || !d1.Cooling["east"].Equal(until) {
			t.Fatalf("the decision after the 429: %+v (cooling %v), want a fallback to west 20ms later with east cooling until %v", d1, d1.Cooling, until)
		}
		if took > time.Second {
			t.Fatalf("answered in %v of fake time; the old wait was retry_after_cap (5 s)", took)
		}
		// Meanwhile: straight to west, the cooling in the start decision.
		time.Sleep(10 * time.Second)
		r, _ = e.ask("cool-tier", "two")
		if routes(r) != "west" || !r.Decisions[0].Cooling["east"].Equal(until) {
			t.Fatalf("a request while east cools: attempts on %s, start %+v", routes(r), r.Decisions[0])
		}
		if east, west := e.primary.Requests(), e.fallback.Requests(); east != 1 || west != 2 {
			t.Fatalf("upstream calls: east %d, west %d; want 1 and 2", east, west)
		}
		// The cooling over, east serves again.
		time.Sleep(10 * time.Second)
		r, _ = e.ask("cool-tier", "three")
		if routes(r) != "east" || r.Decisions[0].Cooling != nil {
			t.Fatalf("after the cooling: attempts on %s, start %+v", routes(r), r.Decisions[0])
		}
		if east, west := e.primary.Requests(), e.fallback.Requests(); east != 2 || west != 2 {
			t.Fatalf("upstream calls: east %d, west %d; want 2 and 2", east, west)
		}
	})
}

// A hint over retry_after_cap cannot be waited out: with a next tier the
// request goes there at once, and so do the requests after it.
func TestAHintOverTheCapGoesToTheNextTier(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, config: coolingConfig}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(throttled("20"))))
		r, took := e.ask("cool-next", "one")
		a1 := r.Attempts[0]
		if routes(r) != "primary,fallback" || r.Decisions[1].Action != "fallback" || !r.Attempts[1].NotBefore.Equal(a1.ObservedAt.Add(20*time.Millisecond)) {
			t.Fatalf("attempts on %s, decision %+v", routes(r), r.Decisions[1])
		}
		if took > time.Second {
			t.Fatalf("answered in %v of fake time; the old wait was 5 s", took)
		}
		r, _ = e.ask("cool-next", "two")
		if routes(r) != "fallback" {
			t.Fatalf("the next request: attempts on %s", routes(r))
		}
		if p, f := e.primary.Requests(), e.fallback.Requests(); p != 1 || f != 2 {
			t.Fatalf("upstream calls: primary %d, fallback %d; want 1 and 2", p, f)
		}
	})
}

// A short hint is honoured on the same route: one within retry_after_cap
// with no other route in its tier is waited for (Retry-After: 1); one no
// longer than the next backoff cools nothing (base_delay 2 s).
func TestAShortHintStillRetriesTheSameRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, config: coolingConfig}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(first(1, throttled("1"))))
		r, _ := e.ask("cool-next", "one")
		a1, a2 := r.Attempts[0], r.Attempts[1]
		if routes(r) != "primary,primary" || a2.Purpose != "retry" || !a2.NotBefore.Equal(a1.ObservedAt.Add(time.Second)) {
			t.Fatalf("attempts on %s, the retry's not_before %v after the 429", routes(r), a2.NotBefore.Sub(a1.ObservedAt))
		}
		e.primary.Reset()
		e.primary.SetScript(rules(first(1, throttled("1"))))
		r, _ = e.ask("cool-slow", "two")
		a1, a2 = r.Attempts[0], r.Attempts[1]
		if routes(r) != "primary,primary" || !a2.NotBefore.Equal(a1.ObservedAt.Add(2*time.Second)) || r.Decisions[1].Cooling != nil {
			t.Fatalf("attempts on %s, wait %v, cooling %v: want the 2 s backoff on primary, nothing cooling",
				routes(r), a2.NotBefore.Sub(a1.ObservedAt), r.Decisions[1].Cooling)
		}
		if p, f := e.primary.Requests(), e.fallback.Requests(); p != 2 || f != 0 {
			t.Fatalf("upstream calls: primary %d, fallback %d", p, f)
		}
	})
}

// A receipt that hides the cooling a fallback was decided under does not
// verify: the replay would have retried the same route.
func TestVerifyReplaysTheCooling(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, config: coolingConfig}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(first(1, throttled("20"))))
		e.ask("cool-tier", "one")
		r, _ := e.ask("cool-tier", "two") // straight to west: east cools
		r.Decisions[0].Cooling = nil
		if err := r.Seal(); err != nil {
			t.Fatal(err)
		}
		if drifts := receipt.Verify(e.pol, r); len(drifts) == 0 {
			t.Fatal("a start on west with nothing cooling verified")
		}
	})
}
