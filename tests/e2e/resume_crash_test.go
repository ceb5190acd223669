package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// resumeConfig has one route that can continue a broken stream
// (assistant prefill) under an alias that resumes after visible output.
const resumeConfig = `
tenants: [{id: e2e, api_key_env: ONCEGATE_E2E_KEY}]
providers: [{id: mock, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}]
routes:
  - {id: mock, provider: mock, model: mock-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: assistant_prefill},
     price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: chat, routes: [mock], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}, stream: {after_output: resume}}
lease: {ttl: 2s, renew: 500ms}
`

// postStream sends a streamed chat request and reads all of it.
func (g *gateway) postStream(ctx context.Context, key, content string) (*http.Response, []byte, error) {
	body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"` + content + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// A gateway killed while it resumes a stream that broke after visible
// output: after a restart the request is indeterminate — never resumed or
// re-sent blind, its key never released (output was shown) — and its
// receipt, rebuilt from the event log with the resume in flight, passes
// oncegate verify.
func TestCrashWhileResumingAStream(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{Tokens: 12, TokenInterval: 5 * time.Millisecond}, b)
		if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(resumeConfig, "MOCK", mockURL(t, w))+b.ledgerLine()), 0o644); err != nil {
			t.Fatal(err)
		}
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{
			{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 3}},
			{Calls: []int{2}, Fault: mock.Fault{Type: mock.FaultHang}},
		}})
		g := w.start()
		go func() { _, _, _ = g.postStream(context.Background(), "resume-crash", "hello") }()
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.Stats().Requests < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the resume never reached the mock")
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.kill(t)
		w.mock.SetScript(mock.Script{})
		afterCrashOf(t, w, "resume-crash", 2, 2, func(g *gateway) (*http.Response, []byte, error) {
			return g.postStream(context.Background(), "resume-crash", "hello")
		})
	})
}
