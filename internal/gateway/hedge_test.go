package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// slowPrimary is an environment whose primary takes 500 ms to its first
// byte; the hedged aliases hedge after 50 ms.
func slowPrimary() envOptions {
	return envOptions{mock: mock.Config{Tokens: 12}, primary: &mock.Config{Tokens: 12, TTFT: 500 * time.Millisecond}}
}

// checkHedgeWon asserts the receipt of a request whose hedge won: two
// attempts, the primary cancelled as hedge_lost (and seen by its mock as a
// disconnect), the hedge on the fallback; both charged, as the mocks
// counted them.
func checkHedgeWon(t *testing.T, e *env, r *receipt.Receipt) {
	t.Helper()
	if len(r.Attempts) != 2 {
		t.Fatalf("%d attempts, want the primary and its hedge", len(r.Attempts))
	}
	p, h := r.Attempts[0], r.Attempts[1]
	if p.Route != "primary" || p.Kind != "cancelled" || p.Cause != "hedge_lost" || p.VisibleOutput {
		t.Fatalf("primary attempt %+v, want cancelled as hedge_lost", p)
	}
	if h.Route != "fallback" || h.Purpose != "hedge" || h.Kind != "ok" {
		t.Fatalf("hedge attempt %+v", h)
	}
	if d := h.NotBefore.Sub(p.StartedAt); d < 50*time.Millisecond || d >= 500*time.Millisecond {
		t.Fatalf("hedged %v into the primary, want after hedge.after (50ms) and before its first byte (500ms)", d)
	}
	if r.Decisions[1].Action != "hedge" || r.Decisions[1].Route != "fallback" || r.Terminal != "succeeded" {
		t.Fatalf("decisions %+v, terminal %s", r.Decisions, r.Terminal)
	}
	pc, fc, _ := e.upstreamCalls(r.RequestID)
	waitFor(t, func() bool { pc, _, _ = e.upstreamCalls(r.RequestID); return pc.Disconnects == 1 })
	if pc.Requests != 1 || fc.Requests != 1 {
		t.Fatalf("mocks saw primary %d, fallback %d calls", pc.Requests, fc.Requests)
	}
	if p.CostUSD <= 0 || h.CostUSD <= 0 || p.Usage.InputTokens != pc.InputTokens || h.Usage.Billable() != fc.Billable() {
		t.Fatalf("charges: primary %v %+v (mock %+v), hedge %v %+v (mock %+v)", p.CostUSD, p.Usage, pc, h.CostUSD, h.Usage, fc)
	}
}

func TestHedgeWinsOverASlowPrimary(t *testing.T) {
	t.Parallel()
	inBubble(t, slowPrimary(), func(t *testing.T, e *env) {
		res, body := e.post("/v1/chat/completions", chatBody("hedged", false), nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d: %s", res.StatusCode, body)
		}
		if res.Header.Get("X-Oncegate-Route") != "fallback" || res.Header.Get("X-Oncegate-Attempts") != "2" {
			t.Fatalf("route %q attempts %q", res.Header.Get("X-Oncegate-Route"), res.Header.Get("X-Oncegate-Attempts"))
		}
		checkHedgeWon(t, e, e.receipt(res.Header.Get("X-Oncegate-Request-Id")))
	})
}

func TestHedgedStreamWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"hedged", "hedged-buffered"} {
		t.Run(model, func(t *testing.T) {
			inBubble(t, slowPrimary(), func(t *testing.T, e *env) {
				text, acc, h, err := e.streamOpenAI(model, prompt)
				if err != nil {
					t.Fatal(err)
				}
				if want := answer(t, provider.OpenAI, prompt, 12); text != want || acc.Model != "fallback-model" {
					t.Fatalf("text %q (model %s), want the fallback's answer %q", text, acc.Model, want)
				}
				r := e.receipt(h.Get("X-Oncegate-Request-Id"))
				checkHedgeWon(t, e, r)
				if billed := acc.Usage.PromptTokens + acc.Usage.CompletionTokens; billed != r.Totals.BillableTokens {
					t.Fatalf("final usage chunk bills %d tokens, the receipt %d", billed, r.Totals.BillableTokens)
				}
			})
		})
	}
}

// No hedge when the primary's first byte comes before hedge.after.
func TestNoHedgeForAPromptPrimary(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 12}}, func(t *testing.T, e *env) {
		c := e.openai(nil)
		if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "hedged", Messages: userMsg("hi")}); err != nil {
			t.Fatal(err)
		}
		text, _, h, err := e.streamOpenAI("hedged", prompt)
		if err != nil || text == "" {
			t.Fatalf("%q %v", text, err)
		}
		if n := e.fallback.Stats().Requests; n != 0 {
			t.Fatalf("the fallback saw %d calls; nothing should have been hedged", n)
		}
		if r := e.receipt(h.Get("X-Oncegate-Request-Id")); len(r.Attempts) != 1 || len(r.Decisions) != 2 {
			t.Fatalf("attempts %+v decisions %+v", r.Attempts, r.Decisions)
		}
	})
}

// A primary that fails before hedge.after is retried as usual; a pair that
// both fail before output is decided as one step; a primary that answers
// while its hedge is still silent wins, and the hedge is cancelled.
func TestHedgedPairOutcomes(t *testing.T) {
	t.Parallel()
	t.Run("primary fails fast: an ordinary retry", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 503})))
			res, _ := e.post("/v1/chat/completions", chatBody("hedged", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.StatusCode != 200 || len(r.Attempts) != 2 || r.Attempts[1].Purpose != "retry" || e.fallback.Stats().Requests != 0 {
				t.Fatalf("%d: %+v", res.StatusCode, r.Attempts)
			}
		})
	})
	t.Run("both fail before output", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, primary: &mock.Config{Tokens: 4, TTFT: 100 * time.Millisecond}}, func(t *testing.T, e *env) {
			e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 502})))
			e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultHang})))
			res, body := e.post("/v1/chat/completions", chatBody("hedged", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			// Attempt 1 (primary) hangs past its first-byte timeout (400ms);
			// its hedge on the fallback fails at once with a 502; the pair is
			// decided by the one observed last, the primary's timeout, which
			// moves on: the fallback has one attempt left (max 2).
			if len(r.Attempts) < 3 || r.Attempts[1].Purpose != "hedge" || r.Attempts[1].Kind != "unavailable" || r.Attempts[0].Kind != "timeout_before_response" {
				t.Fatalf("%d %s: %+v", res.StatusCode, body, r.Attempts)
			}
			if r.Attempts[2].Route != "fallback" || r.Attempts[2].Purpose != "fallback" {
				t.Fatalf("after the pair: %+v", r.Attempts[2])
			}
		})
	})
	t.Run("the primary answers while the hedge is silent", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 400 * time.Millisecond}, primary: &mock.Config{Tokens: 4, TTFT: 120 * time.Millisecond}}, func(t *testing.T, e *env) {
			res, _ := e.post("/v1/chat/completions", chatBody("hedged", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.Header.Get("X-Oncegate-Route") != "primary" || len(r.Attempts) != 2 || r.Attempts[0].Kind != "ok" ||
				r.Attempts[1].Kind != "cancelled" || r.Attempts[1].Cause != "hedge_lost" || r.Attempts[1].CostUSD <= 0 {
				t.Fatalf("route %s: %+v", res.Header.Get("X-Oncegate-Route"), r.Attempts)
			}
			waitFor(t, func() bool { _, f, _ := e.upstreamCalls(r.RequestID); return f.Disconnects == 1 })
		})
	})
}

// The race's rules, step by step: a decisive end claims and cancels the
// rival; a retryable failure leaves the rival racing and keeps its own
// outcome; an attempt whose rival already won has lost, whatever it did.
func TestHedgeRaceRules(t *testing.T) {
	t.Parallel()
	newRace := func() (*hedgeRace, *raceSlot, *raceSlot, *[2]int) {
		cancelled := &[2]int{}
		r := newHedgeRace(clock.System{}, func() { cancelled[0]++ })
		if _, ok := r.hedge(func() { cancelled[1]++ }); !ok {
			t.Fatal("no hedge before any first byte")
		}
		return r, &raceSlot{race: r, i: 0}, &raceSlot{race: r, i: 1}, cancelled
	}
	_, p, h, cancelled := newRace()
	if h.finish(false) || p.finish(true) || *cancelled != [2]int{0, 0} {
		t.Fatalf("a hedge that failed first keeps its outcome; the primary then wins (cancelled %v)", *cancelled)
	}
	_, p, h, cancelled = newRace()
	if !h.claim() || *cancelled != [2]int{1, 0} || !p.finish(false) || p.claim() {
		t.Fatalf("the hedge showed output first: the primary is cancelled and lost (cancelled %v)", *cancelled)
	}
	r, p, _, _ := newRace()
	p.sawFirstByte(time.Now())
	if _, ok := r.hedge(func() {}); ok || p.rivals() != 1 {
		t.Fatal("a second hedge, or one after the first byte")
	}
	r.unhedge()
	if p.rivals() != 0 {
		t.Fatal("an undone hedge still counts as a rival")
	}
	var lone *raceSlot
	if !lone.claim() || lone.finish(true) || lone.rivals() != 0 {
		t.Fatal("a lone attempt always wins")
	}
}
