package gateway

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/oncegate/oncegate/internal/mock"
)

// Every exchange is one log line — refusals included — with what an
// operator asks first: who, which model, the status, how long, how many
// attempts on which routes, tokens and cost. Refusals are WARN, failures
// ERROR; keys never appear; refusals are counted in /metrics too.
func TestEveryRequestIsOneLogLine(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}, logs: lockedWriter{&logs, &mu}}, func(t *testing.T, e *env) {
		e.post("/v1/chat/completions", chatBody("chat", false), nil)
		e.postKey("sk-not-a-key", "/v1/chat/completions", chatBody("chat", false), nil)
		e.post("/v1/chat/completions", chatBody("nope", false), nil)
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		e.post("/v1/chat/completions", chatBody("solo", false), nil)
		for range 4 {
			e.postKey(keyInitech, "/v1/chat/completions", chatBody("chat", false), nil)
		}
		synctest.Wait() // a line is logged once its answer was sent
		mu.Lock()
		text := logs.String()
		mu.Unlock()
		line := func(pattern string) string {
			t.Helper()
			m := regexp.MustCompile(`(?m)^.*msg=request.*` + pattern + `.*$`).FindString(text)
			if m == "" {
				t.Fatalf("no log line matching %q in:\n%s", pattern, text)
			}
			return m
		}
		ok := line(`status=200`)
		for _, want := range []string{"level=INFO", "tenant=acme", "model=chat", "attempts=1", "routes=primary", "tokens=", "cost_usd=", "latency_ms=", "request_id="} {
			if !strings.Contains(ok, want) {
				t.Fatalf("the answer's line lacks %s: %s", want, ok)
			}
		}
		if l := line(`status=401`); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "code=unauthorized") {
			t.Fatalf("a refusal: %s", l)
		}
		if l := line(`status=404`); !strings.Contains(l, "code=model_not_found") || !strings.Contains(l, "model=nope") {
			t.Fatalf("an unknown model: %s", l)
		}
		if l := line(`status=503`); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "code=upstream_unavailable") ||
			!strings.Contains(l, "attempts=3") || !strings.Contains(l, "model=solo") {
			t.Fatalf("a failure: %s", l)
		}
		if l := line(`status=429`); !strings.Contains(l, "code=tenant_rate_limited") || !strings.Contains(l, "tenant=initech") {
			t.Fatalf("a rate limit: %s", l)
		}
		for _, secret := range []string{keyAcme, keyInitech, "sk-not-a-key", primaryProviderKey} {
			if strings.Contains(text, secret) {
				t.Fatalf("a key reached the logs: %s", secret)
			}
		}
		if strings.Contains(text, "What is a logical request?") {
			t.Fatal("a prompt reached the logs without log.bodies")
		}
		metrics := string(e.metricsText())
		for _, sample := range []string{`oncegate_error_responses_total{code="unauthorized",status="401"} 1`,
			`oncegate_error_responses_total{code="tenant_rate_limited",status="429"} 1`} {
			if !strings.Contains(metrics, sample) {
				t.Fatalf("/metrics lacks %s", sample)
			}
		}
	})
}
