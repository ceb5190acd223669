package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// googleConfig routes to the mock's Gemini API, Vertex AI (both
// publishers), Azure OpenAI and OpenAI fakes, all served by one mock:
// each route has its own model name, so the mock's per-model counters
// are each route's exact upstream calls.
const googleConfig = `
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - {id: gemini, type: gemini, base_url: "MOCK", api_key_env: KEY_GEMINI, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: gemini-badkey, type: gemini, base_url: "MOCK", api_key_env: KEY_GEMINI_BAD, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: vertex-google, type: vertex, base_url: "MOCK", project: oncegate-mock, location: us-central1, publisher: google, credentials_file_env: SA_FILE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: vertex-claude, type: vertex, base_url: "MOCK", project: oncegate-mock, location: us-east5, publisher: anthropic, credentials_file_env: SA_FILE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: vertex-stranger, type: vertex, base_url: "MOCK", project: oncegate-mock, location: us-east5, publisher: anthropic, credentials_file_env: SA_FILE_STRANGER, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: azure, type: azure-openai, base_url: "MOCK", api_version: "2024-10-21", api_key_env: KEY_AZURE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: openai, type: openai, base_url: "MOCK/v1", api_key_env: KEY_OPENAI, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: aws, type: bedrock, region: us-east-1, base_url: "MOCK", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - {id: claude-bedrock, provider: aws, model: bedrock-claude, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}}
  - {id: gemini, provider: gemini, model: gemini-2.5-flash, capabilities: {input: [text, image], tools: true, json_schema: true, streaming: true, max_context_tokens: 1000000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 0.3, output_usd_per_mtok: 2.5}}
  - {id: gemini-badkey, provider: gemini-badkey, model: gemini-badkey-model, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 1000000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 0.3, output_usd_per_mtok: 2.5}}
  - {id: vertex-gemini, provider: vertex-google, model: gemini-2.5-pro, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 1000000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1.25, output_usd_per_mtok: 10}}
  - {id: vertex-claude, provider: vertex-claude, model: claude-sonnet-vertex, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}}
  - {id: vertex-stranger, provider: vertex-stranger, model: claude-stranger, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}}
  - {id: vertex-claude-resume, provider: vertex-claude, model: claude-resume-vertex, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 1000, continuation: assistant_prefill}, behavior_class: chat-v1, data_boundary: external, max_attempts: 3, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}}
  - {id: azure, provider: azure, model: gpt-deployment, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: openai, provider: openai, model: gpt-openai, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
models:
  - {name: bedrock-then-vertex, routes: [claude-bedrock, vertex-claude], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 300ms, jitter: none, deadline: 10s}}
  - {name: gemini, routes: [gemini], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: vertex-gemini, routes: [vertex-gemini], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: vertex-claude, routes: [vertex-claude], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: azure-then-gemini, routes: [azure, gemini], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: openai-then-gemini, routes: [openai, gemini], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: badkey-then-gemini, routes: [gemini-badkey, gemini], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: badkey, routes: [gemini-badkey], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: stranger, routes: [vertex-stranger], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: stranger-then-claude, routes: [vertex-stranger, vertex-claude], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: vertex-claude-resume, routes: [vertex-claude-resume], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: gemini-or-openai, routes: [gemini, openai], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
`

const (
	badGeminiKey = "AIza-refused-gemini-key-5c1d"
	openaiKey    = "sk-provider-openai-91be"
)

// googleEnv is a gateway over googleConfig, on the loopback network.
type googleEnv struct {
	*env
	mock    *mock.Mock
	logs    *syncBuffer
	mu      sync.Mutex
	headers []http.Header // every upstream request's headers
	saJSON  []byte
	// front, when set, answers the upstream requests it reports it
	// answered, in the mock's place.
	front func(http.ResponseWriter, *http.Request) bool
}

// setFront answers upstream requests with f in the mock's place, where f
// reports it did.
func (g *googleEnv) setFront(f func(http.ResponseWriter, *http.Request) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.front = f
}

func (g *googleEnv) upstreamHeaders() []http.Header {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]http.Header(nil), g.headers...)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newGoogleEnv(t *testing.T, tokens int) *googleEnv {
	t.Helper()
	return newGoogleEnvWith(t, tokens, "")
}

// newGoogleEnvWith is newGoogleEnv with more aliases: models entries,
// appended to googleConfig's list.
func newGoogleEnvWith(t *testing.T, tokens int, moreModels string) *googleEnv {
	t.Helper()
	g := &googleEnv{mock: mock.New(mock.Config{Tokens: tokens}), logs: &syncBuffer{}}
	t.Cleanup(g.mock.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.headers = append(g.headers, r.Header.Clone())
		front := g.front
		g.mu.Unlock()
		if front != nil && front(w, r) {
			return
		}
		g.mock.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	g.saJSON = mock.ServiceAccountJSON(srv.URL)
	sa := filepath.Join(dir, "sa.json")
	stranger := filepath.Join(dir, "stranger.json")
	if err := os.WriteFile(sa, g.saJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(g.saJSON), mock.DefaultServiceAccountEmail, "stranger@oncegate-mock.iam.gserviceaccount.com", 1)
	if err := os.WriteFile(stranger, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"KEY_ACME": keyAcme, "KEY_GEMINI": mock.DefaultGeminiAPIKey, "KEY_GEMINI_BAD": badGeminiKey,
		"SA_FILE": sa, "SA_FILE_STRANGER": stranger, "KEY_AZURE": mock.DefaultAzureAPIKey, "KEY_OPENAI": openaiKey}
	yaml := strings.ReplaceAll(googleConfig+moreModels, "MOCK", srv.URL)
	e := &env{t: t, client: http.DefaultClient, yaml: yaml}
	var err error
	if e.pol, err = policy.Parse("google.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	if e.secrets, err = e.pol.Config.ResolveSecrets(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	e.dbPath = filepath.Join(dir, "ledger.db")
	e.opts = Options{DrainTimeout: 2 * time.Second, RejoinGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	e.start()
	t.Cleanup(func() { e.stop() })
	g.env = e
	return g
}

// calls is the mock's count of requests for a route's model.
func (g *googleEnv) calls(model string) int64 { return g.mock.Stats().ByModel[model].Requests }

// noSecrets fails if any of the texts holds a client key, a provider
// key, the service account's private key or a bearer token.
func (g *googleEnv) noSecrets(t *testing.T, what string, texts ...string) {
	t.Helper()
	var key struct {
		PrivateKey string `json:"private_key"`
	}
	_ = json.Unmarshal(g.saJSON, &key)
	secrets := []string{keyAcme, mock.DefaultGeminiAPIKey, badGeminiKey, mock.DefaultAzureAPIKey, openaiKey,
		strings.Split(key.PrivateKey, "\n")[1], "Bearer ya29", "API key not valid"}
	for _, s := range texts {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s holds %q", what, secret)
			}
		}
	}
}

var lookupSchema = map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []string{"query"}}

// An OpenAI SDK client served by the Gemini API and by Gemini on Vertex:
// JSON and streamed answers, a tool call and its result, usage and cost
// in the receipt, and the provider's own credentials upstream.
func TestOpenAISDKOverGemini(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 12)
	ctx := context.Background()
	for _, c := range []struct{ alias, model string }{{"gemini", "gemini-2.5-flash"}, {"vertex-gemini", "gemini-2.5-pro"}} {
		var h http.Header
		client := g.openai(&h)
		params := openai.ChatCompletionNewParams{Model: c.alias, Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Be brief."), openai.UserMessage("What is a logical request?")}}
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v", c.alias, err)
		}
		if res.Choices[0].Message.Content == "" || res.Choices[0].FinishReason != "stop" || res.Usage.CompletionTokens != 12 || res.Model != c.model {
			t.Fatalf("%s: %+v", c.alias, res)
		}
		if res.Created == 0 {
			t.Errorf(`%s: the answer says "created": 0`, c.alias)
		}
		r := g.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 1 || r.Attempts[0].Usage.OutputTokens != 12 || r.Attempts[0].Usage.InputTokens == 0 || r.Attempts[0].CostUSD <= 0 || r.Totals.CostUSD <= 0 {
			t.Fatalf("%s receipt: %+v totals %+v", c.alias, r.Attempts, r.Totals)
		}

		streamed := ""
		st := client.Chat.Completions.NewStreaming(ctx, params)
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) > 0 {
				streamed += ch.Choices[0].Delta.Content
			}
		}
		if err := st.Err(); err != nil || streamed != res.Choices[0].Message.Content {
			t.Fatalf("%s stream %q vs json %q (%v)", c.alias, streamed, res.Choices[0].Message.Content, err)
		}

		params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "lookup", Parameters: lookupSchema})}
		st = client.Chat.Completions.NewStreaming(ctx, params)
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			if !acc.AddChunk(st.Current()) {
				t.Fatal("accumulator rejected a chunk")
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		calls := acc.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "lookup" || !json.Valid([]byte(calls[0].Function.Arguments)) || acc.Choices[0].FinishReason != "tool_calls" || calls[0].ID == "" {
			t.Fatalf("%s tool call %+v finish %q", c.alias, calls, acc.Choices[0].FinishReason)
		}
		params.Messages = append(params.Messages, acc.Choices[0].Message.ToParam(), openai.ToolMessage(`{"found": 3}`, calls[0].ID))
		res, err = client.Chat.Completions.New(ctx, params)
		if err != nil || res.Choices[0].FinishReason != "stop" || res.Choices[0].Message.Content == "" {
			t.Fatalf("%s after the tool result: %+v %v", c.alias, res, err)
		}
		if n := g.calls(c.model); n != 4 {
			t.Errorf("%s: %d upstream calls, want 4", c.alias, n)
		}
	}
	g.checkUpstreamAuth(t)
}

// checkUpstreamAuth: every upstream request carried its provider's own
// credential and none carried the client's key.
func (g *googleEnv) checkUpstreamAuth(t *testing.T) {
	t.Helper()
	for _, h := range g.upstreamHeaders() {
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, keyAcme) {
					t.Fatalf("upstream header %s carries the client's key", name)
				}
			}
		}
		if h.Get("x-goog-api-key") == "" && !strings.HasPrefix(h.Get("Authorization"), "Bearer ") && h.Get("api-key") == "" && h.Get("Content-Type") != "application/x-www-form-urlencoded" {
			t.Fatalf("an upstream request without the provider's credential: %v", h)
		}
	}
}

// An Anthropic SDK client served by Claude on Vertex (rawPredict and
// streamRawPredict) and by the Gemini API.
func TestAnthropicSDKOverVertexAndGemini(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 10)
	ctx := context.Background()
	for _, c := range []struct{ alias, model string }{{"vertex-claude", "claude-sonnet-vertex"}, {"gemini", "gemini-2.5-flash"}} {
		var h http.Header
		client := g.anthropicClient(&h)
		params := anthropic.MessageNewParams{Model: anthropic.Model(c.alias), MaxTokens: 100,
			System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is a logical request?"))}}
		res, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v", c.alias, err)
		}
		if len(res.Content) != 1 || res.Content[0].Text == "" || res.StopReason != "end_turn" || res.Usage.OutputTokens != 10 {
			t.Fatalf("%s: %+v", c.alias, res)
		}
		r := g.receipt(h.Get("X-Oncegate-Request-Id"))
		if r.Attempts[0].Usage.OutputTokens != 10 || r.Attempts[0].CostUSD <= 0 {
			t.Fatalf("%s receipt %+v", c.alias, r.Attempts)
		}
		st := client.Messages.NewStreaming(ctx, params)
		var msg anthropic.Message
		for st.Next() {
			if err := msg.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil || msg.Content[0].Text != res.Content[0].Text || msg.Usage.OutputTokens != 10 {
			t.Fatalf("%s stream %+v vs %q (%v)", c.alias, msg, res.Content[0].Text, err)
		}
		params.Tools = []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: lookupSchema["properties"]}, "lookup")}
		res, err = client.Messages.New(ctx, params)
		if err != nil || res.StopReason != "tool_use" || len(res.Content) == 0 || res.Content[len(res.Content)-1].Name != "lookup" {
			t.Fatalf("%s tool: %+v %v", c.alias, res, err)
		}
		if n := g.calls(c.model); n != 3 {
			t.Errorf("%s: %d upstream calls, want 3", c.alias, n)
		}
	}
	if n := g.mock.TokensIssued(); n != 1 {
		t.Errorf("%d tokens issued, want 1: one token serves every call", n)
	}
	g.checkUpstreamAuth(t)
}

// Azure OpenAI answers 503 to a stream: the gateway fails over to Gemini
// before any output, with exact upstream calls (the azure route's two
// attempts, then one Gemini call), and the OpenAI SDK sees one clean
// stream and no retry of its own.
func TestAzure503FailsOverToGeminiOnAStream(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 8)
	g.mock.SetScript(rules(mock.Rule{Model: "gpt-deployment", Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}))
	var h http.Header
	client := g.openai(&h)
	st := client.Chat.Completions.NewStreaming(context.Background(), oaParams("azure-then-gemini", "What is a logical request?"))
	text := ""
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text += ch.Choices[0].Delta.Content
		}
	}
	if err := st.Err(); err != nil || text == "" {
		t.Fatalf("stream %q: %v", text, err)
	}
	if a, gm := g.calls("gpt-deployment"), g.calls("gemini-2.5-flash"); a != 2 || gm != 1 {
		t.Fatalf("azure %d, gemini %d calls; want 2 and 1", a, gm)
	}
	r := g.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 3 || r.Attempts[0].Kind != "unavailable" || r.Attempts[2].Route != "gemini" || r.Attempts[2].Kind != "ok" {
		t.Fatalf("attempts %+v", r.Attempts)
	}
}

// A refused credential — Gemini's 400 API_KEY_INVALID, or a Vertex
// service account the token endpoint refuses — fails its route at once
// and the next route serves; alone, it is 502 upstream_auth_failed.
// No secret reaches a body, a log or a receipt.
func TestGoogleCredentialRefused(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 6)
	var texts []string
	for _, c := range []struct{ alias, refused, next string }{
		{"badkey-then-gemini", "gemini-badkey-model", "gemini-2.5-flash"},
		{"stranger-then-claude", "claude-stranger", "claude-sonnet-vertex"},
	} {
		res, body := g.post("/v1/chat/completions", chatBody(c.alias, false), nil)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.alias, res.StatusCode, body)
		}
		r := g.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 2 || r.Attempts[0].Kind != "account_refused" || r.Attempts[0].Cause != "upstream_auth_failed" || r.Attempts[1].Kind != "ok" {
			t.Fatalf("%s attempts %+v", c.alias, r.Attempts)
		}
		if g.calls(c.next) != 1 {
			t.Fatalf("%s: next route called %d times", c.alias, g.calls(c.next))
		}
		b, _ := json.Marshal(r)
		texts = append(texts, string(body), string(b))
	}
	if n := g.calls("gemini-badkey-model"); n != 1 {
		t.Errorf("the refused key was tried %d times, want 1", n)
	}
	if n := g.calls("claude-stranger"); n != 0 {
		t.Errorf("a request went out without a token: %d", n)
	}
	for _, alias := range []string{"badkey", "stranger"} {
		res, body := g.post("/v1/chat/completions", chatBody(alias, false), nil)
		var eb errorBody
		_ = json.Unmarshal(body, &eb)
		if res.StatusCode != 502 || eb.Error.Code == nil || *eb.Error.Code != api.CodeUpstreamAuthFailed || res.Header.Get("x-should-retry") != "false" {
			t.Fatalf("%s: %d %s", alias, res.StatusCode, body)
		}
		r := g.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		b, _ := json.Marshal(r)
		texts = append(texts, string(body), string(b))
	}
	texts = append(texts, g.logs.String())
	g.noSecrets(t, "a body, receipt or log", texts...)
}

// Fields: a Gemini route carries seed and a JSON schema, which keep an
// Anthropic route off; parallel_tool_calls: false keeps a Gemini route
// off, with the reason in the receipt.
func TestGeminiFieldTable(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 4)
	res, body := g.post("/v1/chat/completions", `{"model":"gemini","seed":7,"response_format":{"type":"json_schema","json_schema":{"name":"o","schema":{"type":"object"}}},"messages":[{"role":"user","content":"hi"}]}`, nil)
	if res.StatusCode != 200 || g.calls("gemini-2.5-flash") != 1 {
		t.Fatalf("seed and a schema on Gemini: %d %s", res.StatusCode, body)
	}
	res, body = g.post("/v1/chat/completions", `{"model":"gemini-or-openai","parallel_tool_calls":false,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"hi"}]}`, nil)
	if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Route") != "openai" {
		t.Fatalf("parallel_tool_calls false: %d %s %v", res.StatusCode, body, res.Header)
	}
	r := g.receipt(res.Header.Get("X-Oncegate-Request-Id"))
	if !strings.Contains(r.Request.IneligibleRoutes["gemini"], "parallel_tool_calls") || g.calls("gemini-2.5-flash") != 1 {
		t.Fatalf("ineligible %v", r.Request.IneligibleRoutes)
	}
	// user is droppable for Gemini: the header lets the route serve.
	res, body = g.post("/v1/chat/completions", `{"model":"gemini","user":"u-1","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-Oncegate-May-Drop": "user"})
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("X-Oncegate-Dropped"), "user") {
		t.Fatalf("user dropped: %d %s %v", res.StatusCode, body, res.Header)
	}
	res, body = g.post("/v1/chat/completions", `{"model":"gemini","user":"u-1","messages":[{"role":"user","content":"hi"}]}`, nil)
	if res.StatusCode != 400 || !strings.Contains(string(body), "user") {
		t.Fatalf("user not droppable without leave: %d %s", res.StatusCode, body)
	}
}

// A Claude stream on Vertex that breaks after visible output is resumed
// by prefill on the same route (streamRawPredict with the partial answer
// as a trailing assistant message): the client reads one seamless answer.
func TestVertexClaudeStreamResumes(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 12)
	g.mock.SetScript(rules(mock.Rule{Model: "claude-resume-vertex", Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 4}}))
	var h http.Header
	client := g.openai(&h)
	st := client.Chat.Completions.NewStreaming(context.Background(), oaParams("vertex-claude-resume", "What is a logical request?"))
	text := ""
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text += ch.Choices[0].Delta.Content
		}
	}
	if err := st.Err(); err != nil || text == "" {
		t.Fatalf("stream %q: %v", text, err)
	}
	s := g.mock.Stats().ByModel["claude-resume-vertex"]
	if s.Requests != 2 || s.Continuations != 1 {
		t.Fatalf("upstream %+v, want 2 requests, 1 continuation", s)
	}
	r := g.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 2 || r.Attempts[0].Kind != "stream_interrupted_after_output" || r.Attempts[1].Kind != "ok" {
		t.Fatalf("attempts %+v", r.Attempts)
	}
	// The same question unbroken: the resumed stream read the same.
	res, err := client.Chat.Completions.New(context.Background(), oaParams("vertex-claude-resume", "What is a logical request?"))
	if err != nil || res.Choices[0].Message.Content != text {
		t.Fatalf("resumed %q, whole %q (%v)", text, res.Choices[0].Message.Content, err)
	}
}

// Claude on Bedrock throttled fails over to Claude on Vertex AI before any
// output, in a JSON answer and in a stream: Bedrock's two attempts
// (ThrottlingException, and a throttlingException event in the stream)
// and one Vertex call each, SigV4 on one side and an OAuth2 token on the
// other. Not parallel: the AWS credentials come from the environment.
func TestBedrockThrottledFailsOverToVertexClaude(t *testing.T) {
	awsEnv(t, mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey)
	g := newGoogleEnv(t, 6)
	for _, tc := range []struct {
		stream bool
		fault  mock.Fault
	}{
		{false, mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "0"}},
		{true, mock.Fault{Type: mock.FaultStreamError, After: 0}},
	} {
		g.mock.SetScript(rules(mock.Rule{Model: "bedrock-claude", Fault: tc.fault}))
		g.mock.Reset()
		res, body := g.post("/v1/chat/completions", chatBody("bedrock-then-vertex", tc.stream), nil)
		if res.StatusCode != 200 || !strings.Contains(string(body), "claude-sonnet-vertex") {
			t.Fatalf("stream %v: %d %s", tc.stream, res.StatusCode, body)
		}
		r := g.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 3 || r.Attempts[0].Kind != "rate_limited" || r.Attempts[1].Kind != "rate_limited" ||
			r.Attempts[0].VisibleOutput || r.Attempts[2].Route != "vertex-claude" || r.Attempts[2].Kind != "ok" {
			t.Fatalf("stream %v: attempts %+v", tc.stream, r.Attempts)
		}
		if b, v := g.calls("bedrock-claude"), g.calls("claude-sonnet-vertex"); b != 2 || v != 1 {
			t.Fatalf("stream %v: Bedrock %d calls, Vertex %d; want 2 and 1", tc.stream, b, v)
		}
	}
}
