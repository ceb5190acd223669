package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/readapi"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The routes of a tier share load by the alias's strategy (docs/routing.md);
// these tests drive the gateway over HTTP against mocks and count what
// each mock served. They run in a synctest bubble: a route's slowness is
// fake time, so that they hold on a busy machine.

// postOK sends request i to alias and fails the test unless it succeeded.
func (e *env) postOK(alias string, i int) *http.Response {
	e.t.Helper()
	res, body := e.post("/v1/chat/completions", distinctBody(alias, i, ""), nil)
	if res.StatusCode != 200 {
		e.t.Fatalf("request %d to %s: %d %s", i, alias, res.StatusCode, body)
	}
	return res
}

// A weighted tier spreads requests by its routes' weights (east 3, west 1)
// end to end: over 600 requests each route's share is within 7 points of
// its weight's (the draws are seeded by random request ids: that is 4
// standard deviations; the engine's own test holds 10,000 draws to 2
// points), every choice verifies, and /metrics and the console count the
// selections.
func TestAWeightedTierSpreadsByWeight(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 2}}, func(t *testing.T, e *env) {
		const n = 600
		for i := range n {
			res := e.postOK("spread", i)
			if i%100 == 0 {
				e.receipt(res.Header.Get("X-Oncegate-Request-Id")) // verifies it
			}
		}
		east, west := e.primary.Requests(), e.fallback.Requests()
		if east+west != n {
			t.Fatalf("%d + %d upstream calls for %d requests", east, west, n)
		}
		share := float64(east) / n
		t.Logf("east %d (%.2f%%), west %d: weights 3:1", east, 100*share, west)
		if share < 0.68 || share > 0.82 {
			t.Fatalf("east's share %.4f, want 0.75 ± 0.07", share)
		}
		// The console's live panel shows each route's share.
		req, _ := http.NewRequest("GET", e.url+"/v1/console/live", nil)
		req.Header.Set("Authorization", "Bearer "+keyAdmin)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var live readapi.LiveView
		err = json.NewDecoder(res.Body).Decode(&live)
		res.Body.Close()
		shares := map[string]float64{}
		for _, r := range live.Routes {
			shares[r.Route] = r.Share
		}
		if err != nil || math.Abs(shares["east"]-share) > 1e-9 || math.Abs(shares["west"]-(1-share)) > 1e-9 {
			t.Fatalf("the live panel's shares %v (%v), want east %v", shares, err, share)
		}
		m := string(e.metricsText())
		for route, count := range map[string]int64{"east": east, "west": west} {
			want := fmt.Sprintf(`oncegate_route_selected_total{alias="spread",route="%s",strategy="weighted"} %d`, route, count)
			if !strings.Contains(m, want) {
				t.Fatalf("/metrics lacks %s", want)
			}
		}
	})
}

// A retry prefers another route of the same tier before the next tier:
// with both routes of the first tier failing before output, a request
// tries each of them once, then the second tier's — three attempts, three
// upstream calls, through the official SDK.
func TestATierRetriesInsideTheTierFirst(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		down := always(mock.Fault{Type: mock.FaultStatus, Status: 503})
		e.primary.SetScript(rules(down))
		e.fallback.SetScript(rules(down))
		var h http.Header
		c := e.openai(&h)
		res, err := c.Chat.Completions.New(context.Background(), oaParams("spread-tiers", "hello"))
		if err != nil || res.Choices[0].Message.Content != answer(t, provider.OpenAI, "hello", 4) {
			t.Fatalf("the second tier's answer: %v %v", res, err)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := e.receipt(id)
		if len(r.Attempts) != 3 {
			t.Fatalf("%d attempts: %+v", len(r.Attempts), r.Attempts)
		}
		first := map[string]bool{r.Attempts[0].Route: true, r.Attempts[1].Route: true}
		if !first["east"] || !first["west"] || r.Attempts[2].Route != "claude" {
			t.Fatalf("attempts on %s, %s, %s: want east and west, then claude", r.Attempts[0].Route, r.Attempts[1].Route, r.Attempts[2].Route)
		}
		if p, f, a := e.upstreamCalls(id); p.Requests != 1 || f.Requests != 1 || a.Requests != 1 {
			t.Fatalf("upstream calls: east %d, west %d, claude %d", p.Requests, f.Requests, a.Requests)
		}
	})
}

// delayed stands in front of a mock and holds every request for the
// current delay first (fake time in a bubble): a route's time to first
// token.
func delayed(d *atomic.Int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Duration(d.Load()))
			next.ServeHTTP(w, r)
		})
	}
}

// least_busy sends a slow route no more than its fair share: the slow
// route's attempts stay in flight, so the idle one wins the choice.
func TestLeastBusyAvoidsASlowRoute(t *testing.T) {
	t.Parallel()
	var slow atomic.Int64
	slow.Store(int64(200 * time.Millisecond))
	inBubble(t, envOptions{mock: mock.Config{Tokens: 2}, front: delayed(&slow)}, func(t *testing.T, e *env) {
		const workers, each = 4, 50
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ids []string
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					id := e.postOK("least-busy", w*each+i).Header.Get("X-Oncegate-Request-Id")
					mu.Lock()
					ids = append(ids, id)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		east, west := e.primary.Requests(), e.fallback.Requests()
		t.Logf("slow east %d, idle west %d", east, west)
		if east+west != workers*each || float64(east) > 0.5*float64(east+west) {
			t.Fatalf("the slow route served %d of %d", east, east+west)
		}
		// Every figure a choice saw is in its receipt, and verify
		// replays the choice from them: the same receipt with the two
		// routes' figures swapped (and sealed again) is caught.
		caught := 0
		for _, id := range ids[:40] {
			r := e.receipt(id) // verifies it
			f := r.Decisions[0].Figures
			if len(f) != 2 || f["east"].InFlight == f["west"].InFlight {
				continue // a tie: swapping changes nothing
			}
			f["east"], f["west"] = f["west"], f["east"]
			if err := r.Seal(); err != nil {
				t.Fatal(err)
			}
			if drifts := receipt.Verify(e.pol, r); len(drifts) == 0 {
				t.Fatalf("receipt %s verifies with its figures swapped", r.RequestID)
			}
			caught++
		}
		if caught == 0 {
			t.Fatal("no least_busy decision records figures that differ")
		}
	})
}

// latency moves traffic off a route whose time to first token triples,
// within ten seconds, and brings it back once the route is fast again
// (its exploration measures it again).
func TestLatencyFollowsTheFasterRoute(t *testing.T) {
	t.Parallel()
	var eastDelay, westDelay atomic.Int64
	eastDelay.Store(int64(20 * time.Millisecond))
	westDelay.Store(int64(30 * time.Millisecond))
	o := envOptions{mock: mock.Config{Tokens: 2}, front: delayed(&eastDelay), fallbackFront: delayed(&westDelay)}
	inBubble(t, o, func(t *testing.T, e *env) {
		i := 0
		// phase sends n requests and reports how many of the last `last`
		// went east.
		phase := func(n, last int) int64 {
			var before int64
			for k := range n {
				if k == n-last {
					before = e.primary.Requests()
				}
				e.postOK("fastest", i)
				i++
			}
			return e.primary.Requests() - before
		}
		if got := phase(100, 50); got < 40 {
			t.Fatalf("east, the faster, got %d of the last 50", got)
		}
		eastDelay.Store(int64(60 * time.Millisecond))
		start := time.Now()
		got := phase(60, 30)
		if moved := time.Since(start); moved > 10*time.Second {
			t.Fatalf("60 requests took %v", moved)
		}
		if got > 6 {
			t.Fatalf("east, three times slower, still got %d of the last 30", got)
		}
		// East wins back its traffic once exploration (a twentieth of the
		// choices, drawn from random request ids) has measured it about
		// four times: 350 requests make that all but certain (fewer than
		// four in 350 at 5 %: about 1 in 100,000), where 150 failed one
		// run in twenty.
		eastDelay.Store(int64(20 * time.Millisecond))
		if got := phase(400, 50); got < 40 {
			t.Fatalf("east, fast again, got only %d of the last 50", got)
		}
	})
}

// rateLimited stands in front of a mock that allows limit requests a
// minute and says so in OpenAI's rate-limit headers — remaining counting
// down when fixed is false, else always fixed remaining; past its limit it
// answers 429, which the test counts.
func rateLimited(limit int, fixed int, tooMany *atomic.Int64) func(http.Handler) http.Handler {
	var served atomic.Int64
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := served.Add(1)
			remaining := int64(limit) - n
			if fixed >= 0 {
				remaining = int64(fixed)
			}
			if remaining < 0 {
				tooMany.Add(1)
				w.Header().Set("Retry-After", "60")
				http.Error(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, http.StatusTooManyRequests)
				return
			}
			w.Header().Set("x-ratelimit-limit-requests", strconv.Itoa(limit))
			w.Header().Set("x-ratelimit-remaining-requests", strconv.FormatInt(remaining, 10))
			w.Header().Set("x-ratelimit-reset-requests", "1m0s")
			next.ServeHTTP(w, r)
		})
	}
}

// quota sends to the route with the most rate-limit headroom and stops
// sending to one whose remaining requests reach zero before it answers
// 429: east (10 a minute) serves exactly its 10, west (which always has
// 5% left) the rest, and nobody gets a 429.
func TestQuotaStopsBeforeTheRateLimit(t *testing.T) {
	t.Parallel()
	var tooMany atomic.Int64
	o := envOptions{mock: mock.Config{Tokens: 2}, front: rateLimited(10, -1, &tooMany), fallbackFront: rateLimited(100, 5, &tooMany)}
	inBubble(t, o, func(t *testing.T, e *env) {
		for i := range 30 {
			e.postOK("headroom", i)
		}
		if n := tooMany.Load(); n != 0 {
			t.Fatalf("%d requests were sent past a rate limit", n)
		}
		if east, west := e.primary.Requests(), e.fallback.Requests(); east != 10 || west != 20 {
			t.Fatalf("east served %d, west %d: want 10 and 20", east, west)
		}
	})
}
