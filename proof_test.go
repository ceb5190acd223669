package oncegate_test

// This file is the seeds' proof as a test you can copy into your own
// service (docs/library.md): it imports nothing of oncegate but the
// public package. A fake provider below the gateway counts every
// physical attempt and fails the first two; the official OpenAI SDK, its
// own retries off, makes one call through the embedded gateway; the
// receipt must list exactly the attempts the provider counted, and no
// more than the configured bound.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate"
)

// proofConfig allows at most 3 attempts for one logical request.
const proofConfig = `
admin_key_env: PROOF_ADMIN
store: memory://
tenants: [{id: app, api_key_env: PROOF_KEY}]
providers: [{id: fake, type: openai, base_url: "UPSTREAM/v1"}]
routes:
  - {id: fake, provider: fake, model: fake-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: chat, routes: [fake], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 30s}}
`

func TestOneCallIsABoundedCountedSetOfAttempts(t *testing.T) {
	var calls atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1) // every physical attempt the gateway makes
		if n <= 2 {       // the fault: two overloaded answers
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error","code":null}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"fake-model",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	defer upstream.Close()

	gw, err := oncegate.Open(context.Background(), oncegate.Options{
		Config: []byte(strings.ReplaceAll(proofConfig, "UPSTREAM", upstream.URL)),
		Env:    map[string]string{"PROOF_KEY": "sk-app", "PROOF_ADMIN": "sk-admin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()

	var requestID string
	client := openai.NewClient(
		option.WithBaseURL("http://oncegate/v1/"),
		option.WithHTTPClient(gw.HTTPClient("sk-app")),
		option.WithMaxRetries(0), // one retry owner: the gateway
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil {
				requestID = res.Header.Get("X-Oncegate-Request-Id")
			}
			return res, err
		}),
	)
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil || res.Choices[0].Message.Content != "hello" {
		t.Fatalf("one user action: %v", err)
	}

	// The receipt, read through the gateway's own API with the admin key.
	r, err := gw.HTTPClient("sk-admin").Get("http://oncegate/v1/receipts/" + requestID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var receipt struct {
		Attempts []struct {
			HTTPStatus int `json:"http_status"`
		} `json:"attempts"`
		Terminal string `json:"terminal"`
	}
	if err := json.NewDecoder(r.Body).Decode(&receipt); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); int64(len(receipt.Attempts)) != got || got != 3 || receipt.Terminal != "succeeded" {
		t.Fatalf("the provider counted %d attempts, the receipt lists %d (%s); want 3 = the bound", got, len(receipt.Attempts), receipt.Terminal)
	}
	for i, a := range receipt.Attempts {
		if want := []int{503, 503, 200}[i]; a.HTTPStatus != want {
			t.Fatalf("attempt %d: HTTP %d, want %d", i+1, a.HTTPStatus, want)
		}
	}
}
