package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// End to end with a bedrock route (docs/providers.md): the
// official OpenAI and Anthropic SDKs at their defaults, the gateway, and
// the mock's independent Bedrock fake — Converse, ConverseStream in AWS's
// event-stream framing, and a real SigV4 check — over real HTTP on
// 127.0.0.1, with the AWS credentials taken from the environment.

const bedrockModel = "us.anthropic.claude-3-5-haiku-20241022-v1:0"

const bedrockConfig = `
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - {id: aws-east, type: bedrock, region: us-east-1, base_url: "BEDROCK", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: mock-anthropic, type: anthropic, base_url: "ANTHROPIC", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - id: claude-bedrock
    provider: aws-east
    model: "` + bedrockModel + `"
    capabilities: {input: [text, image], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 2000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: external
    max_attempts: 2
    price: {input_usd_per_mtok: 1, output_usd_per_mtok: 5, cached_input_usd_per_mtok: 0.1}
  - id: claude
    provider: mock-anthropic
    model: claude-model
    capabilities: {input: [text, image], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 2000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: external
    max_attempts: 2
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}
models:
  - name: claude
    routes: [claude-bedrock, claude]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 300ms, jitter: none, deadline: 10s}
  - name: bedrock-only
    routes: [claude-bedrock]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 300ms, jitter: none, deadline: 10s}
`

// bedrockEnv is an env whose upstreams are a Bedrock fake and an
// Anthropic fake; seen records the headers of every request the Bedrock
// fake received.
type bedrockEnv struct {
	*env
	bedrock *mock.Mock
	mu      sync.Mutex
	seen    []http.Header
}

// awsEnv sets the AWS default chain to the given keys only: no shared
// files, no instance metadata.
func awsEnv(t *testing.T, id, secret string) {
	dir := t.TempDir()
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", id)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
}

func newBedrockEnv(t *testing.T, bcfg mock.Config, secret string) *bedrockEnv {
	t.Helper()
	return newBedrockEnvWith(t, bcfg, secret, "")
}

// newBedrockEnvWith is newBedrockEnv with more aliases: models entries,
// appended to bedrockConfig's list.
func newBedrockEnvWith(t *testing.T, bcfg mock.Config, secret, moreModels string) *bedrockEnv {
	t.Helper()
	id := mock.DefaultAWS.AccessKeyID
	if secret == "" {
		id = "" // no credentials at all
	}
	awsEnv(t, id, secret)
	b := &bedrockEnv{env: &env{t: t, client: http.DefaultClient}, bedrock: mock.New(bcfg)}
	b.anthropic = mock.New(mock.Config{})
	t.Cleanup(b.bedrock.Close)
	t.Cleanup(b.anthropic.Close)
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, r.Header.Clone())
		b.mu.Unlock()
		b.bedrock.ServeHTTP(w, r)
	})
	bsrv, asrv := httptest.NewServer(front), httptest.NewServer(b.anthropic)
	t.Cleanup(bsrv.Close)
	t.Cleanup(asrv.Close)
	yaml := strings.NewReplacer("BEDROCK", bsrv.URL, "ANTHROPIC", asrv.URL).Replace(bedrockConfig + moreModels)
	var err error
	if b.pol, err = policy.Parse("bedrock.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	b.yaml = yaml
	if b.secrets, err = b.pol.Config.ResolveSecrets(func(k string) (string, bool) { return b.envKeys()[k], true }); err != nil {
		t.Fatal(err)
	}
	b.dbPath = filepath.Join(t.TempDir(), "ledger.db")
	b.opts = Options{DrainTimeout: 2 * time.Second, RejoinGrace: time.Second}
	b.start()
	t.Cleanup(func() { b.stop() })
	return b
}

// checkSigned asserts every request the Bedrock fake received was signed
// with the gateway's AWS identity and carried nothing of the client's key.
func (b *bedrockEnv) checkSigned() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) == 0 {
		b.t.Fatal("the Bedrock fake saw no request")
	}
	for _, h := range b.seen {
		if !strings.HasPrefix(h.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="+mock.DefaultAWS.AccessKeyID+"/") ||
			!strings.Contains(h.Get("Authorization"), "/us-east-1/bedrock/aws4_request") {
			b.t.Errorf("not SigV4-signed for bedrock: %q", h.Get("Authorization"))
		}
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, keyAcme) {
					b.t.Errorf("the client's key reached Bedrock in %s", k)
				}
			}
		}
	}
}

func TestBedrockOpenAIClient(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{CachedTokens: 3}, mock.DefaultAWS.SecretAccessKey)
	var h http.Header
	c := b.openai(&h)
	res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say something.")}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Choices[0].Message.Content
	if text == "" || res.Model != bedrockModel || res.Choices[0].FinishReason != "stop" || h.Get("X-Oncegate-Route") != "claude-bedrock" {
		t.Fatalf("answer %+v, route %q", res, h.Get("X-Oncegate-Route"))
	}
	if res.Usage.PromptTokensDetails.CachedTokens != 3 || res.Usage.CompletionTokens == 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	if res.Created == 0 {
		t.Errorf(`the answer says "created": 0; Converse names no time, so the request's is the answer's`)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	a := r.Attempts[0]
	if len(r.Attempts) != 1 || a.Route != "claude-bedrock" || a.Provider != "aws-east" || a.Usage.OutputTokens != res.Usage.CompletionTokens ||
		a.Usage.InputTokens != res.Usage.PromptTokens || a.Usage.CachedTokens != 3 || a.CostUSD <= 0 || r.Totals.CostUSD != a.CostUSD {
		t.Fatalf("receipt %+v", r)
	}

	// The same request streamed: the same text, usage at the end.
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "claude",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say something.")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, oopt("X-Oncegate-Join", "off"))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != text || acc.Usage.CompletionTokens != res.Usage.CompletionTokens || acc.Model != bedrockModel {
		t.Errorf("streamed %q (usage %+v, model %q), answered %q", got, acc.Usage, acc.Model, text)
	}

	// Tools.
	tool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	res, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools:    []openai.ChatCompletionToolUnionParam{tool},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{
			OfAuto: openai.String("required")}})
	if err != nil {
		t.Fatal(err)
	}
	calls := res.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) || res.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool answer %+v", res.Choices[0])
	}
	if n := b.bedrock.Stats().Requests; n != 3 {
		t.Errorf("Bedrock saw %d requests, want 3", n)
	}
	if n := b.anthropic.Stats().Requests; n != 0 {
		t.Errorf("the fallback saw %d requests", n)
	}
	b.checkSigned()
}

func TestBedrockAnthropicClient(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{}, mock.DefaultAWS.SecretAccessKey)
	var h http.Header
	c := b.anthropicClient(&h)
	params := anthropic.MessageNewParams{Model: "claude", MaxTokens: 100, System: []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say something."))}}
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text == "" || string(msg.Model) != bedrockModel || msg.StopReason != "end_turn" || msg.Usage.OutputTokens == 0 {
		t.Fatalf("message %+v", msg)
	}
	st := c.Messages.NewStreaming(context.Background(), params, aopt.WithHeader("X-Oncegate-Join", "off"))
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) == 0 || acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens != msg.Usage.OutputTokens {
		t.Errorf("streamed %+v, answered %+v", acc, msg)
	}

	// A tool call, streamed.
	tparams := anthropic.MessageNewParams{Model: "claude", MaxTokens: 100,
		Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
		Tools:      []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}}
	st = c.Messages.NewStreaming(context.Background(), tparams)
	acc = anthropic.Message{}
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	var used bool
	for _, blk := range acc.Content {
		used = used || blk.Type == "tool_use" && blk.Name == "get_weather" && json.Valid(blk.Input)
	}
	if !used || acc.StopReason != "tool_use" {
		t.Fatalf("streamed tool answer %+v", acc)
	}
	if n := b.bedrock.Stats().Requests; n != 3 {
		t.Errorf("Bedrock saw %d requests, want 3", n)
	}
	b.checkSigned()
}

// TestBedrockThrottledFallsBack: Bedrock throttles (429
// ThrottlingException) every call: the bedrock route is tried its
// max_attempts (2), then the Anthropic route serves — and the SDK, told
// x-should-retry, adds nothing.
func TestBedrockThrottledFallsBack(t *testing.T) {
	throttle := mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "0"}}}}
	b := newBedrockEnv(t, mock.Config{Script: throttle}, mock.DefaultAWS.SecretAccessKey)
	var h http.Header
	oc := b.openai(&h)
	res, err := oc.Chat.Completions.New(context.Background(), oaParams("claude", "Say something."))
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "claude-model" || h.Get("X-Oncegate-Route") != "claude" || h.Get("X-Oncegate-Attempts") != "3" {
		t.Fatalf("model %q route %q attempts %q", res.Model, h.Get("X-Oncegate-Route"), h.Get("X-Oncegate-Attempts"))
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 2 || na != 1 {
		t.Fatalf("Bedrock %d calls, Anthropic %d; want 2 and 1", nb, na)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 3 || r.Attempts[0].Kind != "rate_limited" || r.Attempts[1].Kind != "rate_limited" || r.Attempts[2].Route != "claude" {
		t.Fatalf("receipt attempts %+v", r.Attempts)
	}

	// In a stream: a throttlingException event before any output is the
	// same fault, handled before the client sees anything.
	b.bedrock.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 0}}}})
	b.bedrock.Reset()
	b.anthropic.Reset()
	st := oc.Chat.Completions.NewStreaming(context.Background(), oaParams("claude", "Say something else."))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content == "" || acc.Model != "claude-model" {
		t.Fatalf("stream %+v", acc)
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 2 || na != 1 {
		t.Fatalf("stream: Bedrock %d calls, Anthropic %d; want 2 and 1", nb, na)
	}
	r = b.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 3 || r.Attempts[0].Kind != "rate_limited" || r.Attempts[0].VisibleOutput {
		t.Fatalf("stream receipt attempts %+v", r.Attempts)
	}
	b.checkSigned()
}

// TestBedrockRefusedCredential: Bedrock refuses the gateway's AWS
// credential (a wrong secret: its signature does not match). On an alias
// with another route, that route serves at once; on a Bedrock-only alias
// the client gets 502 upstream_auth_failed — and no secret, nor Bedrock's
// text, in the answer or the receipt.
func TestBedrockRefusedCredential(t *testing.T) {
	const wrong = "wrong-secret-access-key-0123456789"
	b := newBedrockEnv(t, mock.Config{}, wrong)
	var h http.Header
	oc := b.openai(&h)
	res, err := oc.Chat.Completions.New(context.Background(), oaParams("claude", "Say something."))
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("X-Oncegate-Route") != "claude" || res.Choices[0].Message.Content == "" {
		t.Fatalf("route %q", h.Get("X-Oncegate-Route"))
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 1 || na != 1 {
		t.Fatalf("Bedrock %d calls, Anthropic %d; want 1 and 1 (a refused account is not retried)", nb, na)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if r.Attempts[0].Kind != "account_refused" {
		t.Fatalf("first attempt %+v", r.Attempts[0])
	}

	b.bedrock.Reset()
	_, err = oc.Chat.Completions.New(context.Background(), oaParams("bedrock-only", "Say something."))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 || apiErr.Code != "upstream_auth_failed" {
		t.Fatalf("want 502 upstream_auth_failed, got %v", err)
	}
	if n := b.bedrock.Stats().Requests; n != 1 {
		t.Errorf("Bedrock saw %d requests, want 1 (the SDK obeys x-should-retry: false)", n)
	}
	raw := apiErr.RawJSON()
	req, _ := http.NewRequest("GET", b.url+"/v1/receipts/"+h.Get("X-Oncegate-Request-Id"), nil)
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	rr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	receiptBody, _ := io.ReadAll(rr.Body)
	rr.Body.Close()
	for what, text := range map[string]string{"error body": raw, "receipt": string(receiptBody)} {
		for _, secret := range []string{wrong, mock.DefaultAWS.SecretAccessKey, "signature", "security token"} {
			if strings.Contains(strings.ToLower(text), strings.ToLower(secret)) {
				t.Errorf("the %s holds %q: %s", what, secret, text)
			}
		}
	}
}

// TestBedrockNoCredentials: the AWS chain finds no credentials at all.
// Nothing is sent to Bedrock; the route's account counts as refused, and
// the next route serves at once.
func TestBedrockNoCredentials(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{}, "")
	var h http.Header
	oc := b.openai(&h)
	if _, err := oc.Chat.Completions.New(context.Background(), oaParams("claude", "Say something.")); err != nil {
		t.Fatal(err)
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 0 || na != 1 {
		t.Fatalf("Bedrock %d calls, Anthropic %d; want 0 and 1", nb, na)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 2 || r.Attempts[0].Kind != "account_refused" || r.Attempts[1].Route != "claude" {
		t.Fatalf("attempts %+v", r.Attempts)
	}
}

// TestBedrockSkippedForWhatConverseCannotCarry: parallel_tool_calls:
// false translates to Anthropic but not to Converse, so the bedrock route
// is skipped before dispatch, with its reason in the receipt, and the
// Anthropic route serves.
func TestBedrockSkippedForWhatConverseCannotCarry(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{}, mock.DefaultAWS.SecretAccessKey)
	var h http.Header
	oc := b.openai(&h)
	tool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	_, err := oc.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "claude",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools:    []openai.ChatCompletionToolUnionParam{tool}, ParallelToolCalls: openai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 0 || na != 1 {
		t.Fatalf("Bedrock %d calls, Anthropic %d; want 0 and 1", nb, na)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if why := r.Request.IneligibleRoutes["claude-bedrock"]; !strings.Contains(why, "parallel_tool_calls") {
		t.Fatalf("ineligible routes %v", r.Request.IneligibleRoutes)
	}
}

// TestBedrockResumesABrokenStream: Bedrock drops the stream after some
// visible output; the route declares assistant_prefill, so the gateway
// continues the answer on it with the delivered text as a trailing
// assistant message, and the client reads one seamless answer — the same
// text an unbroken call gives.
func TestBedrockResumesABrokenStream(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{Tokens: 40}, mock.DefaultAWS.SecretAccessKey)
	var h http.Header
	oc := b.openai(&h)
	whole, err := oc.Chat.Completions.New(context.Background(), oaParams("bedrock-only", "Tell me a story."))
	if err != nil {
		t.Fatal(err)
	}
	b.bedrock.SetScript(mock.Script{Rules: []mock.Rule{{Calls: []int{2}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 8}}}})
	st := oc.Chat.Completions.NewStreaming(context.Background(), oaParams("bedrock-only", "Tell me a story."), oopt("X-Oncegate-Join", "off"))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, whole.Choices[0].Message.Content; got != want {
		t.Fatalf("resumed stream\n got %q\nwant %q", got, want)
	}
	s := b.bedrock.Stats()
	if s.Requests != 3 || s.Continuations != 1 {
		t.Fatalf("Bedrock requests %d, continuations %d; want 3 and 1", s.Requests, s.Continuations)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 2 || r.Attempts[0].Kind != "stream_interrupted_after_output" || r.Attempts[1].Kind != "ok" {
		t.Fatalf("attempts %+v", r.Attempts)
	}
}
