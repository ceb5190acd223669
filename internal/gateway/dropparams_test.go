package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// dropParamsConfig is the test configuration with drop_params at the top
// level, an alias that sets it back to false and a tenant (hooli) that
// does too.
var dropParamsConfig = strings.NewReplacer(
	"  - name: chat-pair-same\n", `  - name: chat-pair-strict
    routes: [primary, claude]
    drop_params: false
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: chat-pair-same
`,
	"{id: hooli, api_key_env: KEY_HOOLI, budget: {max_concurrent: 2}}", "{id: hooli, api_key_env: KEY_HOOLI, budget: {max_concurrent: 2}, drop_params: false}",
).Replace(testConfig) + "drop_params: true\n"

// bodyTap records every request body a mock receives.
type bodyTap struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (b *bodyTap) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.bodies = append(b.bodies, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func (b *bodyTap) containing(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, body := range b.bodies {
		if bytes.Contains(body, []byte(s)) {
			n++
		}
	}
	return n
}

// drop_params lets a route that cannot carry a droppable field serve the
// request without it, named in X-Oncegate-Dropped and the receipt. The
// narrowest setting wins: the request body's over the tenant's, the
// tenant's over the alias's, the alias's over the top level's. The body's
// own drop_params never reaches a provider.
func TestDropParamsNarrowestSettingWins(t *testing.T) {
	t.Parallel()
	var tap bodyTap
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, config: dropParamsConfig, front: tap.front}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		const metadata = `,"metadata":{"team":"search"}`
		i := 0
		// send posts a request with metadata (which the Anthropic route
		// cannot carry) as key, with extra members, and checks whether the
		// Anthropic fallback served it, dropping metadata, or was skipped.
		send := func(key, alias, extra string, dropped bool) {
			t.Helper()
			i++
			before := e.anthropic.Stats().Requests
			primaryBefore := e.primary.Stats().Requests
			res, body := e.postKey(key, "/v1/chat/completions", distinctBody(alias, i, metadata+extra), nil)
			r := e.receiptAs(key, res.Header.Get("X-Oncegate-Request-Id"))
			served := e.anthropic.Stats().Requests - before
			primary := e.primary.Stats().Requests - primaryBefore
			if int(served+primary) != len(r.Attempts) {
				t.Fatalf("%s %s%s: %d attempts in the receipt, %d+%d upstream calls", key, alias, extra, len(r.Attempts), primary, served)
			}
			if !dropped {
				if res.StatusCode != 503 || served != 0 || !strings.Contains(r.Request.IneligibleRoutes["claude"], "metadata") || res.Header.Get("X-Oncegate-Dropped") != "" {
					t.Fatalf("%s %s%s: want the Anthropic route skipped: %d %s %+v", key, alias, extra, res.StatusCode, body, r.Request.IneligibleRoutes)
				}
				return
			}
			last := r.Attempts[len(r.Attempts)-1]
			if res.StatusCode != 200 || served != 1 || res.Header.Get("X-Oncegate-Dropped") != "metadata" || last.Route != "claude" ||
				fmt.Sprint(last.DroppedFields) != "[metadata]" || fmt.Sprint(r.Request.DroppableFields) != "[metadata]" || len(r.Request.IneligibleRoutes) != 0 {
				t.Fatalf("%s %s%s: want metadata dropped on claude: %d %s dropped %q %+v %+v", key, alias, extra, res.StatusCode, body,
					res.Header.Get("X-Oncegate-Dropped"), r.Request, r.Attempts)
			}
		}
		send(keyAcme, "chat-pair", "", true)                           // the top level's true
		send(keyAcme, "chat-pair-strict", "", false)                   // the alias's false over it
		send(keyAcme, "chat-pair-strict", `,"drop_params":true`, true) // the body's true over the alias's
		send(keyHooli, "chat-pair", "", false)                         // the tenant's false over the alias's true
		send(keyHooli, "chat-pair", `,"drop_params":true`, true)       // the body's true over the tenant's
		send(keyAcme, "chat-pair", `,"drop_params":false`, false)      // the body's false over everything
		send(keyAcme, "chat-pair", `,"drop_params":null`, true)        // null says nothing
		if n := tap.containing("drop_params"); n != 0 {
			t.Fatalf("%d upstream bodies carried drop_params", n)
		}

		// The official SDK sends it as LiteLLM clients do.
		var h http.Header
		c := e.openai(&h)
		p := oaParams("chat-pair-strict", "seeded question")
		p.Seed = openai.Int(7)
		if _, err := c.Chat.Completions.New(context.Background(), p, option.WithJSONSet("drop_params", true)); err != nil || h.Get("X-Oncegate-Dropped") != "seed" {
			t.Fatalf("seed with the body's drop_params: %v, dropped %q", err, h.Get("X-Oncegate-Dropped"))
		}
		if n := tap.containing("drop_params"); n != 0 {
			t.Fatalf("%d upstream bodies carried drop_params", n)
		}

		// A virtual key's drop_params is over its tenant's; null gives the
		// tenant's back.
		lenient := e.issue(`{"tenant":"hooli","name":"lenient","drop_params":true}`)
		strict := e.issue(`{"tenant":"acme","name":"strict","drop_params":false}`)
		if lenient.DropParams == nil || !*lenient.DropParams || strict.DropParams == nil || *strict.DropParams {
			t.Fatalf("issued keys show drop_params %v, %v", lenient.DropParams, strict.DropParams)
		}
		send(lenient.Key, "chat-pair", "", true)                   // the key's true over the tenant's false
		send(strict.Key, "chat-pair", "", false)                   // the key's false over the alias's true
		send(strict.Key, "chat-pair", `,"drop_params":true`, true) // the body's true over the key's
		if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+lenient.ID, `{"drop_params":null}`, nil); st != 200 || strings.Contains(string(b), "drop_params") {
			t.Fatalf("PATCH drop_params null: %d %s", st, b)
		}
		send(lenient.Key, "chat-pair", "", false) // the tenant's false again
		if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+lenient.ID, `{"drop_params":"yes"}`, nil); st != 400 || !strings.Contains(string(b), `"param":"drop_params"`) {
			t.Fatalf("PATCH drop_params \"yes\": %d %s", st, b)
		}

		// A value that is not a boolean is refused by name.
		res, body := e.post("/v1/chat/completions", distinctBody("chat-pair", 99, `,"drop_params":"yes"`), nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), `"param":"drop_params"`) {
			t.Fatalf("drop_params \"yes\": %d %s", res.StatusCode, body)
		}
	})
}
