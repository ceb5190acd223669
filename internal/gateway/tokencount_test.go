package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
)

const countBody = `{"model":"claude","messages":[{"role":"user","content":"How many tokens is this?"}]}`

// countTokens asks for a token count as the tenant of key.
func (e *env) countTokens(key string) (*http.Response, string, string) {
	e.t.Helper()
	res, b := e.postKey(key, "/v1/messages/count_tokens", countBody, map[string]string{"anthropic-version": "2023-06-01"})
	var body struct {
		Oncegate struct{ Source string }
		Error    struct{ Type string }
	}
	_ = json.Unmarshal(b, &body)
	var eb errorBody
	_ = json.Unmarshal(b, &eb)
	code := ""
	if eb.Error.Code != nil {
		code = *eb.Error.Code
	}
	return res, body.Oncegate.Source, code
}

// A token count asks a provider, so it spends the tenant's request rate:
// a tenant over its rate gets 429 tenant_rate_limited, and nothing more
// reaches the provider. Each count is in /metrics and the access log.
func TestTokenCountsSpendTheTenantsRate(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	inBubble(t, envOptions{logs: lockedWriter{&logs, &mu}}, func(t *testing.T, e *env) {
		for i := range 3 { // initech: 3 requests a minute
			if res, source, _ := e.countTokens(keyInitech); res.StatusCode != 200 || source != "provider" {
				t.Fatalf("count %d within the rate: %d %s", i, res.StatusCode, source)
			}
		}
		res, _, code := e.countTokens(keyInitech)
		if res.StatusCode != 429 || code != api.CodeTenantRateLimited || res.Header.Get("Retry-After") == "" || res.Header.Get("x-should-retry") != "true" {
			t.Fatalf("a count over the rate: %d %q Retry-After %q", res.StatusCode, code, res.Header.Get("Retry-After"))
		}
		if n := e.anthropic.Lookups(); n != 3 {
			t.Fatalf("the provider was asked %d times for 3 counts within the rate", n)
		}
		// The count spent the same rate a generation does.
		if res, _ := e.postKey(keyInitech, "/v1/messages", distinctBody("claude", 1, `,"max_tokens":10`), nil); res.StatusCode != 429 {
			t.Fatalf("a message after the counts spent the rate: %d", res.StatusCode)
		}
		for sample, want := range map[string]float64{
			`oncegate_auxiliary_requests_total{operation="count_tokens",source="provider"}`:        3,
			`oncegate_auxiliary_attempts_total{kind="ok",operation="count_tokens",route="claude"}`: 3,
			`oncegate_tenant_rejections_total{code="tenant_rate_limited",tenant="initech"}`:        2,
		} {
			if got := e.metricValue(sample); got != want {
				t.Errorf("%s = %v, want %v", sample, got, want)
			}
		}
		synctest.Wait() // a line is logged once its answer was sent
		mu.Lock()
		text := logs.String()
		mu.Unlock()
		line := regexp.MustCompile(`(?m)^.*msg=request.*path=/v1/messages/count_tokens status=200.*$`).FindString(text)
		for _, want := range []string{"tenant=initech", "model=claude", "routes=claude", "token_count=provider"} {
			if !strings.Contains(line, want) {
				t.Fatalf("the count's log line lacks %s: %q", want, line)
			}
		}
	})
}

// A token count is admitted by its route's breaker and tells it how the
// provider did: failing counts open it like failing attempts, and while
// it is open a count is the gateway's estimate, with no upstream call.
func TestTokenCountsHonourTheBreaker(t *testing.T) {
	t.Parallel()
	yaml := "breaker: {failure_ratio: 0.5, min_requests: 3, window: 60s, open_for: 30s, half_open_probes: 1}\n"
	inBubble(t, envOptions{yaml: yaml}, func(t *testing.T, e *env) {
		e.anthropic.SetScript(rules(mock.Rule{CountTokens: true, Fault: mock.Fault{Type: mock.FaultStatus, Status: 529}}))
		for i := range 3 {
			if res, source, _ := e.countTokens(keyAcme); res.StatusCode != 200 || source != "estimate" {
				t.Fatalf("count %d on an overloaded provider: %d %s", i, res.StatusCode, source)
			}
		}
		if got := e.metricValue(`oncegate_breaker_state{route="claude"}`); got != 2 {
			t.Fatalf("three failed counts left the breaker in state %v, want open (2)", got)
		}
		asked := e.anthropic.Lookups()
		if res, source, _ := e.countTokens(keyAcme); res.StatusCode != 200 || source != "estimate" || res.Header.Get("X-Oncegate-Token-Count") != "estimate" {
			t.Fatalf("a count with the breaker open: %d %s", res.StatusCode, source)
		}
		if n := e.anthropic.Lookups(); n != asked {
			t.Fatalf("a count reached the provider through an open breaker (%d calls, %d before)", n, asked)
		}
		if got := e.metricValue(`oncegate_auxiliary_attempts_total{kind="circuit_open",operation="count_tokens",route="claude"}`); got != 1 {
			t.Fatalf("counts kept back by the breaker: %v", got)
		}
	})
}

// A tenant at its max_concurrent is refused a token count too, before
// anything reaches a provider.
func TestTokenCountsHonourTheTenantsConcurrency(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		e.anthropic.SetScript(rules(mock.Rule{CountTokens: true, FirstCalls: 2, Fault: mock.Fault{Type: mock.FaultHang}}))
		var wg sync.WaitGroup
		for range 2 { // hooli: 2 at once
			wg.Go(func() {
				if res, source, _ := e.countTokens(keyHooli); res.StatusCode != 200 || source != "estimate" {
					t.Errorf("a count within the limit: %d %s", res.StatusCode, source)
				}
			})
		}
		synctest.Wait() // both wait for a provider that hangs
		asked := e.anthropic.Lookups()
		if res, _, code := e.countTokens(keyHooli); res.StatusCode != 429 || code != api.CodeTenantConcurrency {
			t.Fatalf("a third count: %d %q", res.StatusCode, code)
		}
		if n := e.anthropic.Lookups(); n != asked {
			t.Fatal("a refused count reached the provider")
		}
		wg.Wait()
	})
}
