package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/quota"
)

// postKey sends a raw request as the tenant of key.
func (e *env) postKey(key, path, body string, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res, data
}

// distinctBody is a request no other request joins: keyless identical
// bodies in flight together would be one logical request.
func distinctBody(model string, i int, extra string) string {
	return `{"model":"` + model + `"` + extra + `,"messages":[{"role":"user","content":"question number ` + strconv.Itoa(i) + `"}]}`
}

// outcome is what one of many concurrent requests got.
type outcome struct {
	status   int
	code     string
	attempts int
	retry    string
}

// fire sends n distinct requests for model, conc at a time, and tallies
// their outcomes.
func (e *env) fire(n, conc int, model string) []outcome {
	e.t.Helper()
	out := make([]outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(distinctBody(model, i, "")))
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			res, err := e.client.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			var eb errorBody
			body, _ := io.ReadAll(res.Body)
			_ = json.Unmarshal(body, &eb)
			o := outcome{status: res.StatusCode, retry: res.Header.Get("x-should-retry")}
			if eb.Error.Code != nil {
				o.code = *eb.Error.Code
			}
			o.attempts, _ = strconv.Atoi(res.Header.Get("X-Oncegate-Attempts"))
			out[i] = o
		}()
	}
	wg.Wait()
	return out
}

func count(outs []outcome, f func(outcome) bool) int {
	n := 0
	for _, o := range outs {
		if f(o) {
			n++
		}
	}
	return n
}

// metricsText reads /metrics with the admin key.
func (e *env) metricsText() []byte {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+keyAdmin)
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		e.t.Fatalf("/metrics: %d %s", res.StatusCode, body)
	}
	return body
}

// metricValue reads one sample from /metrics, e.g.
// oncegate_breaker_state{route="primary"}.
func (e *env) metricValue(sample string) float64 {
	e.t.Helper()
	body := e.metricsText()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		e.t.Fatalf("no sample %s in /metrics:\n%s", sample, body)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

const outageYAML = `
breaker: {failure_ratio: 0.5, min_requests: 20, window: 60s, open_for: 30s, half_open_probes: 3}
retry_budget: {ratio: 0.1, min_per_second: 1, window: 60s}
`

// An outage on the only route: the breaker opens after min_requests
// attempts, and from then on requests fail fast with 503 circuit_open and
// no upstream call. Half-open admits at most half_open_probes; a failed
// probe re-opens it; a successful one closes it. Breaker timing runs on
// the injected clock.
func TestBreakerContainsAnOutage(t *testing.T) {
	t.Parallel()
	clk := &clock.Offset{}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: outageYAML, clock: clk}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		const n, conc = 1000, 16
		outs := e.fire(n, conc, "solo")
		calls := e.primary.Stats().Requests
		if bound := int64(1.1*n + 1*60); calls > bound {
			t.Fatalf("%d upstream calls for %d requests, over (1+ratio)×n + min_per_second×window = %d", calls, n, bound)
		}
		// Once min_requests attempts failed, every request in flight had at
		// most its current attempt and one retry admitted.
		if calls > 20+2*conc {
			t.Fatalf("%d upstream calls: the breaker did not open after min_requests (20)", calls)
		}
		fast := count(outs, func(o outcome) bool { return o.code == api.CodeCircuitOpen && o.attempts == 0 })
		if fast < n-20-2*conc || count(outs, func(o outcome) bool { return o.code == api.CodeCircuitOpen && (o.retry != "false" || o.status != 503) }) > 0 {
			t.Fatalf("%d of %d requests failed fast (503 circuit_open, no attempt, x-should-retry: false)", fast, n)
		}
		if got := e.metricValue(`oncegate_breaker_state{route="primary"}`); got != 2 {
			t.Fatalf("oncegate_breaker_state{route=primary} = %v, want 2 (open)", got)
		}
		res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if res.StatusCode != 503 || len(r.Attempts) != 0 || r.Reason != "circuit_open" || len(r.Decisions) != 1 || r.Decisions[0].BreakerRefused[0] != "primary" {
			t.Fatalf("fail-fast request: %d %s, receipt %+v", res.StatusCode, body, r.Decisions)
		}

		// Half-open: the primary now hangs, so probes stay in flight; of ten
		// concurrent requests at most three reach it.
		clk.Advance(30 * time.Second)
		e.primary.Reset()
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))
		outs = e.fire(10, 10, "solo")
		if probes := e.primary.Stats().Requests; probes < 1 || probes > 3 {
			t.Fatalf("half-open admitted %d probes, want 1..3", probes)
		}
		if got := count(outs, func(o outcome) bool { return o.code == api.CodeCircuitOpen }); got < 7 {
			t.Fatalf("%d of 10 refused while half-open, want ≥ 7", got)
		}
		if got := e.metricValue(`oncegate_breaker_state{route="primary"}`); got != 2 {
			t.Fatalf("failed probes should re-open the breaker, state %v", got)
		}

		// Recovery: the route is healthy again; after open_for one probe
		// succeeds and closes the breaker, and traffic flows.
		clk.Advance(30 * time.Second)
		e.primary.Reset()
		e.primary.SetScript(mock.Script{})
		lastID := ""
		for i := range 5 {
			res, body := e.post("/v1/chat/completions", distinctBody("solo", 5000+i, ""), nil)
			if res.StatusCode != 200 {
				t.Fatalf("after recovery request %d: %d %s", i, res.StatusCode, body)
			}
			lastID = res.Header.Get("X-Oncegate-Request-Id")
		}
		if got := e.metricValue(`oncegate_breaker_state{route="primary"}`); got != 0 {
			t.Fatalf("breaker state %v after a successful probe, want 0 (closed)", got)
		}
		r = e.receipt(lastID)
		if r.Attempts[0].Breaker.State != "closed" || r.Attempts[0].Breaker.Generation < 5 {
			t.Fatalf("attempt breaker %+v: want closed at a generation past open→half-open→open→half-open→closed", r.Attempts[0].Breaker)
		}
	})
}

// With a fallback, an open primary is skipped: traffic fails over at once
// (one attempt, on the fallback), and the receipt says why.
func TestOpenBreakerFailsOverWithoutTryingTheRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: outageYAML}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		outs := e.fire(200, 8, "chat")
		if bad := count(outs, func(o outcome) bool { return o.status != 200 }); bad > 0 {
			t.Fatalf("%d of 200 failed although the fallback is healthy", bad)
		}
		if p := e.primary.Stats().Requests; p > 20+2*8 {
			t.Fatalf("the primary saw %d calls after its breaker should have opened", p)
		}
		res, _ := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 1 || r.Attempts[0].Route != "fallback" || r.Attempts[0].Purpose != "initial" ||
			fmt.Sprint(r.Decisions[0].BreakerRefused) != "[primary]" || res.Header.Get("X-Oncegate-Route") != "fallback" {
			t.Fatalf("want one attempt on the fallback with the primary refused: %+v / %+v", r.Attempts, r.Decisions[0])
		}
	})
}

// The fleet retry budget alone (the breaker never opens here) bounds an
// outage's amplification: upstream calls ≤ (1 + ratio) × requests +
// min_per_second × window, and the refused retries say so.
func TestRetryBudgetBoundsAmplification(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: `
breaker: {min_requests: 1000000}
retry_budget: {ratio: 0.1, min_per_second: 1, window: 60s}
`}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		const n = 1000
		outs := e.fire(n, 32, "solo")
		calls := e.primary.Stats().Requests
		if bound := int64(1.1*n + 60); calls > bound || calls < n {
			t.Fatalf("%d upstream calls for %d requests with max_attempts 3, want %d..%d", calls, n, n, bound)
		}
		spent := count(outs, func(o outcome) bool { return o.code == api.CodeRetryBudget })
		if spent < n-int(calls-n) || count(outs, func(o outcome) bool { return o.code == api.CodeRetryBudget && (o.retry != "false" || o.status != 503) }) > 0 {
			t.Fatalf("%d requests stopped with 503 retry_budget_exhausted and x-should-retry false", spent)
		}
		if got := e.metricValue(`oncegate_retry_budget_rejections_total`); int(got) != spent {
			t.Fatalf("oncegate_retry_budget_rejections_total %v, want %d", got, spent)
		}
	})
}

func TestTenantRateLimit(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		for i := range 3 {
			if res, body := e.postKey(keyInitech, "/v1/chat/completions", distinctBody("chat", i, ""), nil); res.StatusCode != 200 {
				t.Fatalf("request %d within the rate: %d %s", i, res.StatusCode, body)
			}
		}
		before := e.primary.Stats().Requests
		res, body := e.postKey(keyInitech, "/v1/chat/completions", distinctBody("chat", 3, ""), nil)
		var eb errorBody
		_ = json.Unmarshal(body, &eb)
		ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.StatusCode != 429 || eb.Error.Code == nil || *eb.Error.Code != api.CodeTenantRateLimited || ra < 1 || ra > 20 ||
			res.Header.Get("x-should-retry") != "true" || !strings.Contains(eb.Error.Message, "3 requests per minute") {
			t.Fatalf("4th request: %d Retry-After %q x-should-retry %q %s", res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("x-should-retry"), body)
		}
		if e.primary.Stats().Requests != before {
			t.Fatal("a rate-limited request reached a provider")
		}
		// Other tenants are not affected.
		if res, _ := e.post("/v1/chat/completions", distinctBody("chat", 3, ""), nil); res.StatusCode != 200 {
			t.Fatalf("acme was limited by initech's rate: %d", res.StatusCode)
		}
	})
}

// A tenant with max_concurrent 2 and two requests in progress: a third
// (chat or responses) is refused with 429 tenant_concurrency_limited
// before anything reaches a provider; other tenants are not held back;
// once the two end, the tenant is served again.
func TestTenantConcurrencyLimit(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 300 * time.Millisecond}}, func(t *testing.T, e *env) {
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				if res, body := e.postKey(keyHooli, "/v1/chat/completions", distinctBody("chat", i, ""), nil); res.StatusCode != 200 {
					t.Errorf("request %d within the limit: %d %s", i, res.StatusCode, body)
				}
			})
		}
		synctest.Wait() // both are waiting for their first token
		before := e.primary.Stats().Requests
		for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
			body := distinctBody("chat", 2, "")
			if path == "/v1/responses" {
				body = `{"model":"chat","input":"a third"}`
			}
			res, b := e.postKey(keyHooli, path, body, nil)
			var eb errorBody
			_ = json.Unmarshal(b, &eb)
			if res.StatusCode != 429 || eb.Error.Code == nil || *eb.Error.Code != api.CodeTenantConcurrency || res.Header.Get("Retry-After") != "1" ||
				res.Header.Get("x-should-retry") != "true" || !strings.Contains(eb.Error.Message, "2 requests in progress") {
				t.Fatalf("a third on %s: %d Retry-After %q x-should-retry %q %s", path, res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("x-should-retry"), b)
			}
		}
		if got := e.primary.Stats().Requests; got != before {
			t.Fatalf("a refused request reached a provider (%d calls, %d before)", got, before)
		}
		// Another tenant is not held back.
		if res, b := e.post("/v1/chat/completions", distinctBody("chat", 3, ""), nil); res.StatusCode != 200 {
			t.Fatalf("acme while hooli is at its limit: %d %s", res.StatusCode, b)
		}
		wg.Wait()
		if res, b := e.postKey(keyHooli, "/v1/chat/completions", distinctBody("chat", 4, ""), nil); res.StatusCode != 200 {
			t.Fatalf("hooli after its requests ended: %d %s", res.StatusCode, b)
		}
	})
}

// 64 concurrent requests at the tenant's daily ceiling ($0.001): the sum
// their receipts charge never passes it by more than one reservation, and
// the ones that do not fit get 429 tenant_budget_exceeded with Retry-After
// and no upstream call.
func TestTenantCostCeilingUnderConcurrency(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 24}}, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var charged float64
		var ids []string
		refused, served := 0, 0
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(distinctBody("chat", i, `,"max_tokens":24`)))
				req.Header.Set("Authorization", "Bearer "+keyUmbrella)
				res, err := e.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				switch res.StatusCode {
				case 200:
					served++
					ids = append(ids, res.Header.Get("X-Oncegate-Request-Id"))
				case 429:
					var eb errorBody
					_ = json.Unmarshal(body, &eb)
					// Refused while reservations in flight held the rest
					// (pending, come back soon) or once charges did
					// (exceeded, the day's answer).
					pending := eb.Error.Code != nil && *eb.Error.Code == api.CodeTenantPending && res.Header.Get("x-should-retry") == "true"
					exceeded := eb.Error.Code != nil && *eb.Error.Code == api.CodeTenantBudget && res.Header.Get("x-should-retry") == "false"
					if !pending && !exceeded || res.Header.Get("Retry-After") == "" || eb.Oncegate.Attempts != 0 {
						t.Errorf("over the ceiling: %d %s (Retry-After %q)", res.StatusCode, body, res.Header.Get("Retry-After"))
					}
					refused++
				default:
					t.Errorf("status %d: %s", res.StatusCode, body)
				}
			}()
		}
		wg.Wait()
		var reservation float64
		for _, id := range ids {
			r := e.receiptAs(keyUmbrella, id)
			charged += r.Totals.CostUSD
			reservation = max(reservation, r.Attempts[0].ReservedUSD)
		}
		if charged > 0.001+reservation+1e-12 || served == 0 || refused == 0 {
			t.Fatalf("served %d refused %d, charged $%.6f: over the $0.001 ceiling by more than one reservation ($%.6f)", served, refused, charged, reservation)
		}
		if p := e.primary.Stats().Requests; int(p) != served {
			t.Fatalf("the provider saw %d calls for %d served requests", p, served)
		}
	})
}

// A refusal caused only by reservations of requests in flight is not the
// day's answer: while charged spend leaves room, 429
// tenant_budget_pending tells the client to come back soon; once charges
// leave none, 429 tenant_budget_exceeded until midnight UTC.
func TestReservationsInFlightRefuseForNowNotForTheDay(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 24, TTFT: 300 * time.Millisecond}}, func(t *testing.T, e *env) {
		// The umbrella tenant has $0.001 a day; one request with
		// max_tokens 400 reserves $0.0008 and holds it while the
		// provider thinks (fake time, in the bubble).
		body := func(i int) string { return distinctBody("solo", i, `,"max_tokens":400`) }
		done := make(chan int, 1)
		go func() {
			res, _ := e.postKey(keyUmbrella, "/v1/chat/completions", body(0), nil)
			done <- res.StatusCode
		}()
		synctest.Wait() // the first request is in flight, its reservation held
		res, b := e.postKey(keyUmbrella, "/v1/chat/completions", body(1), nil)
		var eb errorBody
		_ = json.Unmarshal(b, &eb)
		ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.StatusCode != 429 || eb.Error.Code == nil || *eb.Error.Code != api.CodeTenantPending || res.Header.Get("x-should-retry") != "true" ||
			ra < 1 || ra > 60 {
			t.Fatalf("held only by a request in flight: %d %s (Retry-After %q)", res.StatusCode, b, res.Header.Get("Retry-After"))
		}
		if st := <-done; st != 200 {
			t.Fatalf("the request in flight: %d", st)
		}
		// Charged now: 24 output tokens of 400 reserved. The next fits.
		if res, b := e.postKey(keyUmbrella, "/v1/chat/completions", body(2), nil); res.StatusCode != 200 {
			t.Fatalf("after the request in flight settled: %d %s", res.StatusCode, b)
		}
		// Spend the day for real: charges alone leave no room.
		for i := 3; i < 100; i++ {
			res, b := e.postKey(keyUmbrella, "/v1/chat/completions", distinctBody("solo", i, `,"max_tokens":24`), nil)
			if res.StatusCode == 200 {
				continue
			}
			_ = json.Unmarshal(b, &eb)
			if eb.Error.Code == nil || *eb.Error.Code != api.CodeTenantBudget || res.Header.Get("x-should-retry") != "false" {
				t.Fatalf("with the day charged: %d %s", res.StatusCode, b)
			}
			return
		}
		t.Fatal("the ceiling never refused")
	})
}

// A request without an output limit reserves, and is sent upstream with,
// the alias's default_output_tokens; a client's own limit wins.
func TestTheDefaultOutputLimitIsReservedAndSent(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		res, body := e.post("/v1/chat/completions", distinctBody("chat-default", 1, ""), nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		price := gw.PriceFromPerMTok(1, 2) // the primary's
		if want := price.WorstCase(r.Request.EstimatedInputTokens, 64).USD(); r.Attempts[0].ReservedUSD != want {
			t.Fatalf("reserved $%v, want $%v (64 output tokens)", r.Attempts[0].ReservedUSD, want)
		}
		if st := e.primary.Stats(); st.MaxTokensAsked != 64 || st.Unlimited != 0 {
			t.Fatalf("sent upstream with max_tokens %d (%d with none), want 64", st.MaxTokensAsked, st.Unlimited)
		}
		if res, body := e.post("/v1/chat/completions", distinctBody("chat-default", 2, `,"max_tokens":500`), nil); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		if st := e.primary.Stats(); st.MaxTokensAsked != 500 {
			t.Fatalf("the client's own max_tokens was sent as %d, want 500", st.MaxTokensAsked)
		}
	})
}

// Per-request bounds each name what was exceeded.
func TestPerRequestBoundsExplainThemselves(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		// Cost: one attempt's worst case over the alias's max_cost_usd.
		res, body := e.post("/v1/chat/completions", distinctBody("capped", 1, `,"max_tokens":1000`), nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), "max_cost_usd $0.001") || !strings.Contains(string(body), "max_tokens") {
			t.Fatalf("cost bound: %d %s", res.StatusCode, body)
		}
		// Attempts: the attempt budget is named with its number.
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		res, body = e.post("/v1/chat/completions", distinctBody("solo", 2, ""), nil)
		if res.StatusCode != 503 || !strings.Contains(string(body), "within 3 attempts") {
			t.Fatalf("attempt bound: %d %s", res.StatusCode, body)
		}
		// Duration: the caller's budget.
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))
		res, body = e.post("/v1/chat/completions", distinctBody("solo", 3, ""), map[string]string{"X-Oncegate-Timeout-Ms": "150"})
		if res.StatusCode != 504 || !strings.Contains(string(body), "150ms") {
			t.Fatalf("duration bound: %d %s", res.StatusCode, body)
		}
		// Size: the body limit.
		res, body = e.post("/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"`+strings.Repeat("x", 5<<20)+`"}]}`, nil)
		if res.StatusCode != 413 || !strings.Contains(string(body), "4194304 bytes") {
			t.Fatalf("size bound: %d %.200s", res.StatusCode, body)
		}
		// Size, announced: refused before any of the body is sent.
		const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + keyAcme + "\r\n"
		c := dialRaw(t, e)
		c.write(head + "Content-Length: 5242880\r\n\r\n")
		res, body = c.answer()
		wantError(t, res, body, 413, false, api.CodeRequestTooLarge, "announces 5242880 bytes", "the 4194304 bytes limits.max_body_bytes allows")
		// Time: a body that stops arriving is answered when
		// limits.body_read_timeout (30 s) has passed.
		c = dialRaw(t, e)
		c.write(head + "Content-Length: 62\r\n\r\n{\"model\":")
		res, body = c.answer()
		wantError(t, res, body, 408, false, api.CodeRequestTimeout, "within 30s", "9 of the 62 bytes")
	})
}

// /metrics exports docs/operations.md's names, counted from receipts.
func TestMetricsCountWhatReceiptsSay(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 503})))
		res, _ := e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{"Idempotency-Key": "m-1"})
		if res.StatusCode != 200 {
			t.Fatal(res.StatusCode)
		}
		e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{"Idempotency-Key": "m-1", "X-Stainless-Retry-Count": "1"})
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		for sample, want := range map[string]float64{
			`oncegate_logical_requests_total{model="chat",terminal="succeeded"}`:            1,
			`oncegate_attempts_total{class="retryable",kind="unavailable",route="primary"}`: 1,
			`oncegate_attempts_total{class="success",kind="ok",route="primary"}`:            1,
			`oncegate_attempts_per_logical_request_sum`:                                     2,
			`oncegate_dedup_total{result="miss"}`:                                           1,
			`oncegate_dedup_total{result="replayed"}`:                                       1,
			`oncegate_client_retries_total`:                                                 1,
			`oncegate_retries_after_visible_output_total`:                                   0,
			`oncegate_billable_tokens_total{route="primary",tenant="acme",type="output"}`:   float64(r.Attempts[1].Usage.OutputTokens),
			`oncegate_breaker_state{route="primary"}`:                                       0,
		} {
			if got := e.metricValue(sample); got != want {
				t.Errorf("%s = %v, want %v", sample, got, want)
			}
		}
	})
}

// lastSlot is a fleet whose snapshot says yes but whose last slot goes to
// a concurrent request at the moment of dispatch: the breaker of route
// refuses to Acquire, the budget to Retry, the tenant to Reserve.
type lastSlot struct {
	route           string
	noRetry, noCost bool
}

func (l *lastSlot) Allows(string) bool { return true }
func (l *lastSlot) Acquire(route string) (breaker.Ticket, bool) {
	return breaker.Ticket{State: breaker.Closed, Generation: 1}, route != l.route
}
func (l *lastSlot) Done(string, breaker.Ticket, breaker.Outcome) {}
func (l *lastSlot) Take(string) (bool, time.Duration, error)     { return true, 0, nil }
func (l *lastSlot) Allowance(string) (gw.NanoUSD, bool)          { return 1 << 40, l.noCost }
func (l *lastSlot) Reserve(t string, a gw.NanoUSD, _ time.Time) (quota.Reservation, bool) {
	return quota.Reservation{Tenant: t, Amount: a}, !l.noCost
}
func (l *lastSlot) Settle(quota.Reservation, gw.NanoUSD) {}
func (l *lastSlot) Charged(string) gw.NanoUSD            { return 0 }

// lastRetry is lastSlot's retry budget.
type lastRetry struct{ *lastSlot }

func (l lastRetry) First(string)       {}
func (l lastRetry) Allows(string) bool { return true }
func (l lastRetry) Retry(string) bool  { return !l.noRetry }

func lastSlotEnv(l *lastSlot) envOptions {
	return envOptions{mock: mock.Config{Tokens: 4}, breakers: l, budget: lastRetry{l}, tenants: l}
}

// What the snapshot admitted but a concurrent request took first is
// decided again, and the receipt records the admission that decided.
func TestAdmissionLostAtDispatchIsDecidedAgain(t *testing.T) {
	t.Parallel()
	t.Run("the primary's last probe", func(t *testing.T) {
		l := &lastSlot{route: "primary"}
		inBubble(t, lastSlotEnv(l), func(t *testing.T, e *env) {
			res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.StatusCode != 200 || len(r.Attempts) != 1 || r.Attempts[0].Route != "fallback" || fmt.Sprint(r.Decisions[0].BreakerRefused) != "[primary]" {
				t.Fatalf("%d %s: %+v %+v", res.StatusCode, body, r.Attempts, r.Decisions)
			}
			if e.primary.Stats().Requests != 0 {
				t.Fatal("the refused route was called")
			}
		})
	})
	t.Run("the provider's last retry", func(t *testing.T) {
		l := &lastSlot{noRetry: true}
		inBubble(t, lastSlotEnv(l), func(t *testing.T, e *env) {
			// Only one provider: nothing else may serve the retry.
			e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 503})))
			res, _ := e.post("/v1/chat/completions", chatBody("solo", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.StatusCode != 503 || len(r.Attempts) != 1 || r.Reason != "retry_budget" || fmt.Sprint(r.Decisions[1].RetryBudgetRefused) != "[mock-primary]" {
				t.Fatalf("%d: %+v %+v", res.StatusCode, r.Attempts, r.Decisions)
			}
			// A route on another provider: the retry the failing provider's
			// budget refuses goes there, as a first attempt.
			e.primary.Reset()
			e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 503})))
			res, _ = e.post("/v1/chat/completions", chatBody("chat", false), nil)
			r = e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.StatusCode != 200 || len(r.Attempts) != 2 || r.Attempts[1].Route != "fallback" || fmt.Sprint(r.Decisions[1].RetryBudgetRefused) != "[mock-primary]" {
				t.Fatalf("%d: %+v %+v", res.StatusCode, r.Attempts, r.Decisions)
			}
		})
	})
	t.Run("the tenant's last dollar", func(t *testing.T) {
		l := &lastSlot{noCost: true}
		inBubble(t, lastSlotEnv(l), func(t *testing.T, e *env) {
			res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if res.StatusCode != 429 || !strings.Contains(string(body), api.CodeTenantBudget) || len(r.Attempts) != 0 || r.Reason != "cost_budget" ||
				r.Decisions[0].TenantAllowanceUSD == nil {
				t.Fatalf("%d %s: %+v", res.StatusCode, body, r.Decisions)
			}
		})
	})
}

// The day's spend lives in the store: a tenant at its ceiling is still at
// it after a restart (the new process does not hand it a fresh budget).
func TestTenantSpendSurvivesARestart(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 24}}, func(t *testing.T, e *env) {
		served := 0
		for i := 0; ; i++ {
			res, body := e.postKey(keyUmbrella, "/v1/chat/completions", distinctBody("chat", i, `,"max_tokens":24`), nil)
			if res.StatusCode == 429 {
				if !strings.Contains(string(body), api.CodeTenantBudget) {
					t.Fatalf("refused for another reason: %s", body)
				}
				break
			}
			if res.StatusCode != 200 || i > 100 {
				t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
			}
			served++
		}
		calls := e.primary.Stats().Requests
		e.restart()
		res, body := e.postKey(keyUmbrella, "/v1/chat/completions", distinctBody("chat", 1000, `,"max_tokens":24`), nil)
		if res.StatusCode != 429 || !strings.Contains(string(body), api.CodeTenantBudget) {
			t.Fatalf("after a restart, at the ceiling (%d served before): %d %s", served, res.StatusCode, body)
		}
		if n := e.primary.Stats().Requests; n != calls {
			t.Fatalf("the provider saw %d more calls after the restart", n-calls)
		}
	})
}

// What is sent upstream is what was reserved: with a provider that writes
// as many tokens as it may, a tenant's ceiling under 64 concurrent
// requests — asking for more than the route allows, or for nothing — is
// passed by at most one reservation, and no request upstream asks for
// more than the route's max_output_tokens (1000).
func TestTheUpstreamLimitIsWhatWasReserved(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5000}}, func(t *testing.T, e *env) {
		var mu sync.Mutex
		var ids []string
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				extra := `,"max_tokens":5000`
				switch i % 3 {
				case 1:
					extra = ""
				case 2:
					extra = `,"max_completion_tokens":4000`
				}
				res, body := e.postKey(keySpender, "/v1/chat/completions", distinctBody("chat", i, extra), nil)
				switch {
				case res.StatusCode == 200:
					mu.Lock()
					ids = append(ids, res.Header.Get("X-Oncegate-Request-Id"))
					mu.Unlock()
				case res.StatusCode == 429 && (strings.Contains(string(body), api.CodeTenantBudget) || strings.Contains(string(body), api.CodeTenantPending)):
				default:
					t.Errorf("request %d: %d %s", i, res.StatusCode, body)
				}
			}()
		}
		wg.Wait()
		var charged, reservation float64
		for _, id := range ids {
			r := e.receiptAs(keySpender, id)
			charged += r.Totals.CostUSD
			reservation = max(reservation, r.Attempts[0].ReservedUSD)
			if out := r.Attempts[0].Usage.OutputTokens; out > 1000 {
				t.Fatalf("request %s generated %d tokens past the route's 1000", id, out)
			}
		}
		if len(ids) == 0 || charged > 0.05+reservation+1e-12 {
			t.Fatalf("%d served, charged $%.6f: over the $0.05 ceiling by more than one reservation ($%.6f)", len(ids), charged, reservation)
		}
		if st := e.primary.Stats(); st.MaxTokensAsked > 1000 || st.Unlimited != 0 {
			t.Fatalf("upstream requests asked for up to %d tokens (%d for no limit); the route allows 1000", st.MaxTokensAsked, st.Unlimited)
		}
	})
}

// The request rate outlives a restart too: a tenant that spent its minute
// is still refused by the next process.
func TestTenantRateSurvivesARestart(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		for i := range 3 {
			if res, body := e.postKey(keyInitech, "/v1/chat/completions", distinctBody("chat", i, ""), nil); res.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
			}
		}
		if res, _ := e.postKey(keyInitech, "/v1/chat/completions", distinctBody("chat", 3, ""), nil); res.StatusCode != 429 {
			t.Fatalf("the 4th of 3 a minute: %d", res.StatusCode)
		}
		e.restart()
		res, body := e.postKey(keyInitech, "/v1/chat/completions", distinctBody("chat", 4, ""), nil)
		if res.StatusCode != 429 || !strings.Contains(string(body), api.CodeTenantRateLimited) {
			t.Fatalf("after a restart, the minute spent: %d %s", res.StatusCode, body)
		}
	})
}

// A request in flight when its process died still holds its reservation
// in the next process: the day starts from what was charged and what
// requests left in progress reserved. (The chaos soak found a tenant over
// its ceiling after a SIGKILL without it: the next process handed that
// reservation out again.)
func TestAReservationInFlightSurvivesACrash(t *testing.T) {
	t.Parallel()
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 24}})
	e.stop()
	// What the dead process left: a request of umbrella (ceiling
	// $0.001) whose attempt reserved $0.00098 and was out when it died.
	st, err := sqlite.Open(e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := &ledger.Record{Identity: "k:dead", RequestID: "dead", Tenant: "umbrella", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Generation: 1, Owner: "a-dead-process", LeaseUntil: now.Add(time.Hour), CreatedAt: now}
	if _, _, err := st.Claim(context.Background(), rec, []ledger.Event{
		{RequestID: "dead", Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now, Data: []byte(`{}`)},
		{RequestID: "dead", Seq: 2, Generation: 1, Type: ledger.EvReserved, At: now, Data: []byte(`{"ordinal":1,"route":"primary","reserve_usd":0.00098}`)},
	}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	e.start()
	calls := e.primary.Stats().Requests
	res, body := e.postKey(keyUmbrella, "/v1/chat/completions", distinctBody("chat", 1, `,"max_tokens":24`), nil)
	if res.StatusCode != 429 || !strings.Contains(string(body), api.CodeTenantBudget) {
		t.Fatalf("with $0.00098 of $0.001 reserved by a request in flight: %d %s", res.StatusCode, body)
	}
	if n := e.primary.Stats().Requests; n != calls {
		t.Fatalf("the provider saw %d calls", n-calls)
	}
}

// refusing is a store that reports writes its database refused, as a
// SQLite ledger written through its intent log does.
type refusing struct {
	ledger.Store
	n int
}

func (r refusing) Refused() int { return r.n }

// A ledger that counts refused writes has the count on /metrics, for an
// alert: it is always 0 unless there is a bug. A store that does not count
// them has no such metric.
func TestLedgerRefusedWritesAreAMetric(t *testing.T) {
	e := newEnvOpts(t, envOptions{wrap: func(s ledger.Store) ledger.Store { return refusing{Store: s, n: 3} }})
	if v := e.metricValue("oncegate_ledger_refused_writes"); v != 3 {
		t.Fatalf("oncegate_ledger_refused_writes %v, want the store's 3", v)
	}
	plain := newEnv(t, mock.Config{})
	if strings.Contains(string(plain.metricsText()), "oncegate_ledger_refused_writes") {
		t.Fatal("a store that counts no refused writes has the metric")
	}
}
