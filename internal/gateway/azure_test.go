package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// The azure-openai provider type end to end (docs/providers.md): the
// official SDKs at their defaults, over real HTTP, against the mock's
// independent Azure OpenAI fake (internal/mock/azure.go), which checks
// the api-key header and the api-version of deployment URLs itself.

const (
	// azureBadKey is a key the Azure fake refuses.
	azureBadKey = "azure-key-that-was-revoked-1234"
	// azureTagSecret is a header value read from the environment.
	azureTagSecret = "tag-secret-value-5e1d"
)

// azureConfig puts Azure deployments (on the primary mock, whose requests
// the test sees) in front of the v1 API (on the fallback mock).
const azureConfig = `
admin_key_env: KEY_ADMIN
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - id: azure-east
    type: azure-openai
    base_url: "PRIMARY"
    api_version: "2024-10-21"
    api_key_env: KEY_AZURE
    headers: {X-Team: payments, X-Tag: {env: KEY_TAG}}
    query: {route-hint: east}
    timeouts: {connect: 1s, first_byte: 2s, idle: 2s}
  - {id: azure-v1, type: azure-openai, base_url: "FALLBACK", api_key_env: KEY_AZURE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: azure-v1-east, type: azure-openai, base_url: "PRIMARY/openai", api_key_env: KEY_AZURE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: azure-revoked, type: azure-openai, base_url: "PRIMARY", api_version: "2024-10-21", api_key_env: KEY_AZURE_BAD, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - {id: east, provider: azure-east, model: gpt-4o-east, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: v1, provider: azure-v1, model: gpt-4o-v1, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: v1-east, provider: azure-v1-east, model: gpt-4o-v1e, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: revoked, provider: azure-revoked, model: gpt-4o-revoked, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: embed-east, provider: azure-east, model: embed-east, capabilities: {input: [text], max_context_tokens: 8000, max_output_tokens: 1}, behavior_class: embed-v1, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 0.1, output_usd_per_mtok: 0}}
models:
  - name: chat
    routes: [east, v1]
    retry: {max_attempts: 4, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: v1
    routes: [v1-east]
    retry: {max_attempts: 2, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: revoked-first
    routes: [revoked, v1]
    retry: {max_attempts: 4, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: revoked-only
    routes: [revoked]
    retry: {max_attempts: 4, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: embed
    routes: [embed-east]
    retry: {max_attempts: 1, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
`

// seen records the requests that reached the primary mock.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Clone(context.Background()))
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (s *seen) last(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("no request reached the primary mock")
	}
	return s.reqs[len(s.reqs)-1]
}

func newAzureEnv(t *testing.T) (*env, *seen) {
	t.Helper()
	s := &seen{}
	return newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 8}, config: azureConfig, front: s.front}), s
}

// checkAzureRequest holds one upstream request to Azure's contract: the
// gateway's api-key and nothing of the client's credential.
func checkAzureRequest(t *testing.T, r *http.Request, path string, query url.Values) {
	t.Helper()
	if r.URL.Path != path {
		t.Errorf("path %q, want %q", r.URL.Path, path)
	}
	for k := range query {
		if got := r.URL.Query().Get(k); got != query.Get(k) {
			t.Errorf("query %s=%q, want %q (%s)", k, got, query.Get(k), r.URL.RawQuery)
		}
	}
	if r.Header.Get("api-key") != mock.DefaultAzureAPIKey {
		t.Errorf("api-key %q", r.Header.Get("api-key"))
	}
	for name, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, keyAcme) {
				t.Errorf("the client's key went upstream in %s", name)
			}
		}
	}
	if r.Header.Get("Authorization") != "" {
		t.Errorf("Authorization went to Azure: %q", r.Header.Get("Authorization"))
	}
}

func TestAzureOpenAIJSONStreamToolsAndReceipt(t *testing.T) {
	t.Parallel()
	e, s := newAzureEnv(t)
	ctx := context.Background()
	var h http.Header
	c := e.openai(&h)

	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hello azure")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content == "" || res.Usage.CompletionTokens == 0 {
		t.Fatalf("answer %+v", res)
	}
	r := s.last(t)
	checkAzureRequest(t, r, "/openai/deployments/gpt-4o-east/chat/completions",
		url.Values{"api-version": {"2024-10-21"}, "route-hint": {"east"}})
	if r.Header.Get("X-Team") != "payments" || r.Header.Get("X-Tag") != azureTagSecret {
		t.Errorf("provider headers: X-Team %q X-Tag %q", r.Header.Get("X-Team"), r.Header.Get("X-Tag"))
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	a := rc.Attempts
	if len(a) != 1 || a[0].Provider != "azure-east" || a[0].Usage.OutputTokens == 0 || a[0].CostUSD <= 0 || rc.Totals.CostUSD != a[0].CostUSD {
		t.Fatalf("receipt attempts %+v totals %+v", a, rc.Totals)
	}
	if e.primary.Requests() != 1 || e.fallback.Requests() != 0 {
		t.Fatalf("upstream calls: primary %d fallback %d, want 1 and 0", e.primary.Requests(), e.fallback.Requests())
	}

	// Streamed, with a tool the fake calls.
	params := openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("weather?"),
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	st := c.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) == 0 || len(acc.Choices[0].Message.ToolCalls) != 1 || acc.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("stream: %+v", acc.Choices)
	}
	if acc.Usage.TotalTokens == 0 {
		t.Fatalf("stream usage %+v", acc.Usage)
	}
	checkAzureRequest(t, s.last(t), "/openai/deployments/gpt-4o-east/chat/completions", url.Values{"api-version": {"2024-10-21"}})
	rc = e.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 1 || rc.Attempts[0].Usage.OutputTokens == 0 || rc.Totals.CostUSD <= 0 {
		t.Fatalf("stream receipt %+v", rc.Attempts)
	}

	// An Anthropic client served by the Azure deployment: translated both ways.
	ac := e.anthropicClient(&h)
	msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello from anthropic"))}})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.Usage.OutputTokens == 0 {
		t.Fatalf("anthropic answer %+v", msg)
	}
	checkAzureRequest(t, s.last(t), "/openai/deployments/gpt-4o-east/chat/completions", url.Values{"api-version": {"2024-10-21"}})

	// Embeddings on a deployment.
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("vector me")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings %+v", emb)
	}
	checkAzureRequest(t, s.last(t), "/openai/deployments/embed-east/embeddings", url.Values{"api-version": {"2024-10-21"}})
}

// With api_version empty the v1 API serves, the deployment in the body's
// model; a base_url written with the SDKs' /openai suffix is the same
// endpoint.
func TestAzureOpenAIV1API(t *testing.T) {
	t.Parallel()
	e, s := newAzureEnv(t)
	c := e.openai(nil)
	res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "v1", Messages: userMsg("hello v1")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content == "" || res.Model != "gpt-4o-v1e" {
		t.Fatalf("answer %+v", res)
	}
	r := s.last(t)
	checkAzureRequest(t, r, "/openai/v1/chat/completions", nil)
	if r.URL.Query().Has("api-version") {
		t.Errorf("the v1 API takes no api-version: %s", r.URL.RawQuery)
	}
}

// A deployment that answers 503 is retried within its route's cap, then
// the next route serves: exact calls on each mock.
func TestAzureOpenAIUnavailableFailsOver(t *testing.T) {
	t.Parallel()
	e, _ := newAzureEnv(t)
	e.primary.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gpt-4o-east", Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	var h http.Header
	c := e.openai(&h)
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("fail over")})
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content == "" {
		t.Fatal("no answer")
	}
	if p, f := e.primary.Requests(), e.fallback.Requests(); p != 2 || f != 1 {
		t.Fatalf("upstream calls: primary %d (east, max_attempts 2) fallback %d, want 2 and 1", p, f)
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 3 || rc.Attempts[0].Kind != string(gw.KindUnavailable) || rc.Attempts[2].Route != "v1" || h.Get("X-Oncegate-Route") != "v1" {
		t.Fatalf("receipt %+v", rc.Attempts)
	}
}

// Azure's refusal of the gateway's key ("invalid subscription key") is
// upstream_auth_failed: never the provider's text, never a secret; the
// next route serves when there is one, and the refused route is not
// tried again.
func TestAzureOpenAIRefusedKey(t *testing.T) {
	t.Parallel()
	e, _ := newAzureEnv(t)
	var h http.Header
	c := e.openai(&h)
	res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "revoked-first", Messages: userMsg("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content == "" || h.Get("X-Oncegate-Route") != "v1" {
		t.Fatalf("answer %+v route %q", res, h.Get("X-Oncegate-Route"))
	}
	if p, f := e.primary.Requests(), e.fallback.Requests(); p != 1 || f != 1 {
		t.Fatalf("upstream calls: primary %d fallback %d, want 1 and 1", p, f)
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 2 || rc.Attempts[0].Kind != string(gw.KindAccountRefused) {
		t.Fatalf("receipt %+v", rc.Attempts)
	}

	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "revoked-only", Messages: userMsg("hello again")})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Code != api.CodeUpstreamAuthFailed {
		t.Fatalf("want 502 %s, got %v", api.CodeUpstreamAuthFailed, err)
	}
	rc = e.receipt(ae.Response.Header.Get("X-Oncegate-Request-Id"))
	rj, _ := json.Marshal(rc)
	for _, where := range []string{ae.RawJSON(), string(rj)} {
		if strings.Contains(where, azureBadKey) || strings.Contains(where, "subscription key") {
			t.Fatalf("a secret or the provider's text leaked: %s", where)
		}
	}
	if p := e.primary.Requests(); p != 2 {
		t.Fatalf("a refused key is not retried on its route: primary %d calls, want 2", p)
	}
}

// Azure's content filter is policy_denied: passed to the client, never
// shopped to another route.
func TestAzureOpenAIContentFilter(t *testing.T) {
	t.Parallel()
	e, _ := newAzureEnv(t)
	e.primary.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gpt-4o-east", Fault: mock.Fault{Type: mock.FaultContentPolicy}}}})
	var h http.Header
	c := e.openai(&h)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("filtered")})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
		t.Fatalf("want the filter's 400, got %v", err)
	}
	if p, f := e.primary.Requests(), e.fallback.Requests(); p != 1 || f != 0 {
		t.Fatalf("upstream calls: primary %d fallback %d, want 1 and 0", p, f)
	}
	rc := e.receipt(ae.Response.Header.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 1 || rc.Attempts[0].Kind != string(gw.KindPolicyDenied) {
		t.Fatalf("receipt %+v", rc.Attempts)
	}
}

// Azure's 429 names its wait in retry-after-ms: the next attempt on the
// route is scheduled no sooner, as the receipt records.
func TestAzureOpenAIRetryAfterMS(t *testing.T) {
	t.Parallel()
	e, _ := newAzureEnv(t)
	e.primary.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gpt-4o-east", Calls: []int{1},
		Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "1", RetryAfterMS: "150"}}}})
	var h http.Header
	c := e.openai(&h)
	if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("throttled")}); err != nil {
		t.Fatal(err)
	}
	if p, f := e.primary.Requests(), e.fallback.Requests(); p != 2 || f != 0 {
		t.Fatalf("upstream calls: primary %d fallback %d, want 2 and 0", p, f)
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	a := rc.Attempts
	if len(a) != 2 || a[0].Kind != string(gw.KindRateLimited) || a[0].RetryAfterMS == nil || *a[0].RetryAfterMS != 150 || a[1].Route != "east" {
		t.Fatalf("receipt %+v", a)
	}
	if wait := a[1].NotBefore.Sub(a[0].ObservedAt); wait < 150*time.Millisecond {
		t.Fatalf("the retry was scheduled %v after the 429, before its retry-after-ms", wait)
	}
}

// A reload that reads a new header value (a rotated secret) sends it from
// the next request on; one that changes nothing keeps the client.
func TestProviderHeadersFollowAReload(t *testing.T) {
	t.Parallel()
	e, s := newAzureEnv(t)
	c := e.openai(nil)
	ask := func() *http.Request {
		t.Helper()
		if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hi")}); err != nil {
			t.Fatal(err)
		}
		return s.last(t)
	}
	if got := ask().Header.Get("X-Tag"); got != azureTagSecret {
		t.Fatalf("X-Tag %q", got)
	}
	before := e.gw.cur.Load().clients["azure-east"]
	if err := e.gw.Reload(e.pol, e.secrets); err != nil {
		t.Fatal(err)
	}
	if e.gw.cur.Load().clients["azure-east"] != before {
		t.Fatal("a reload that changed nothing made a new client")
	}
	rotated, err := e.pol.Config.ResolveSecrets(func(k string) (string, bool) {
		if k == "KEY_TAG" {
			return "rotated-tag-value-0b7e", true
		}
		return e.envKeys()[k], true
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.gw.Reload(e.pol, rotated); err != nil {
		t.Fatal(err)
	}
	if got := ask().Header.Get("X-Tag"); got != "rotated-tag-value-0b7e" {
		t.Fatalf("after the reload X-Tag %q", got)
	}
}
