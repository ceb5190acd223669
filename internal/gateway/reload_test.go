package gateway

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// A reload while requests run: a new tenant and a new model on a new
// route work at once, the new route has a breaker, and requests that
// started before it finish on the configuration they started with.
func TestReloadSwapsWhileRequestsRun(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6, TTFT: 200 * time.Millisecond}}, func(t *testing.T, e *env) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, b := e.post("/v1/chat/completions", chatBody("solo", true), nil); res.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
					t.Errorf("a request across the reload: %d", res.StatusCode)
				}
			}()
		}
		for e.primary.Stats().Requests < 1 { // identical keyless requests share one generation
			time.Sleep(time.Millisecond)
		}
		grown := strings.Replace(e.yaml, "models:\n", `  - id: extra
    provider: mock-fallback
    model: extra-model
    capabilities: {input: [text], streaming: true, max_context_tokens: 8000, max_output_tokens: 1000}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 1
models:
  - name: extra
    routes: [extra]
`, 1)
		grown = strings.Replace(grown, "tenants:\n", "tenants:\n  - {id: newcomer, api_key_env: KEY_NEWCOMER}\n", 1)
		pol, err := policy.Parse("test.yaml", []byte(grown))
		if err != nil {
			t.Fatal(err)
		}
		secrets, err := pol.Config.ResolveSecrets(func(k string) (string, bool) {
			if k == "KEY_NEWCOMER" {
				return "sk-newcomer", true
			}
			v, ok := e.envKeys()[k]
			return v, ok
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.gw.Reload(pol, secrets); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if res, b := e.postKey("sk-newcomer", "/v1/chat/completions", chatBody("extra", false), nil); res.StatusCode != 200 {
			t.Fatalf("the new tenant on the new model: %d %s", res.StatusCode, b)
		}
		if n := e.fallback.Stats().ByModel["extra-model"].Requests; n != 1 {
			t.Fatalf("the new route served %d requests", n)
		}
		found := false
		e.gw.breakers.(breaker.StateLister).States(func(route string, _ breaker.State, _ int64) { found = found || route == "extra" })
		if !found {
			t.Fatal("the new route has no breaker")
		}
		// What a running process cannot change is refused, and nothing
		// changes.
		pol2, _ := policy.Parse("test.yaml", []byte(strings.Replace(grown, "tenants:\n", "lease: {ttl: 45s, renew: 15s}\ntenants:\n", 1)))
		if err := e.gw.Reload(pol2, secrets); err == nil || !strings.Contains(err.Error(), "lease") {
			t.Fatalf("a lease change was not refused: %v", err)
		}
		// Nor can the fingerprint secret, even where its file changed.
		moved := *secrets
		moved.GatewaySecret = "a-new-fingerprint-secret"
		if err := e.gw.Reload(pol, &moved); err == nil || !strings.Contains(err.Error(), "fingerprint secret") {
			t.Fatalf("a new fingerprint secret was not refused: %v", err)
		}
		if res, _ := e.postKey("sk-newcomer", "/v1/chat/completions", chatBody("extra", false), nil); res.StatusCode != 200 {
			t.Fatal("a refused reload changed the configuration")
		}
	})
}
