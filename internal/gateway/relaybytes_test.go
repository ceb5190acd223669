package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// Whole answers in the client's own protocol, with what the gateway's
// wire types do not model: OpenAI's service_tier and reasoning tokens,
// Anthropic's cache_creation breakdown, server_tool_use and service_tier,
// and a provider's extension in each.
const (
	bytesOpenAIAnswer = `{"id":"chatcmpl-upstream-7","object":"chat.completion","created":1764633600,"model":"primary-model",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"A logical request is one user action.","refusal":null,"annotations":[]},` +
		`"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":123,"completion_tokens":45,"total_tokens":168,"prompt_tokens_details":{"cached_tokens":100,"audio_tokens":0},` +
		`"completion_tokens_details":{"reasoning_tokens":7}},` +
		`"service_tier":"priority","system_fingerprint":"fp_upstream_42","x_provider":{"region":"eu-west","shard":3}}`
	bytesAnthropicAnswer = `{"id":"msg_upstream_7","type":"message","role":"assistant","model":"claude-model",` +
		`"content":[{"type":"text","text":"A logical request is one user action.","citations":null}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":20,"cache_creation_input_tokens":30,"cache_read_input_tokens":100,"output_tokens":45,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":30},"server_tool_use":{"web_search_requests":2},"service_tier":"priority"},` +
		`"x_provider":{"region":"eu-west","shard":3}}`
)

// bytesFront answers the primary's chat completions and messages calls
// with the bodies in its fields instead of the mock.
type bytesFront struct{ openAI, anthropic atomic.Value }

func (f *bytesFront) front(m http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body any
		switch r.URL.Path {
		case "/v1/chat/completions":
			body = f.openAI.Load()
		case "/v1/messages":
			body = f.anthropic.Load()
		}
		if body == nil {
			m.ServeHTTP(w, r)
			return
		}
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body.(string))
	})
}

// bytesEnv serves the anthropic routes from the primary's address too, so
// that one front answers both protocols.
func bytesEnv(f *bytesFront) envOptions {
	return envOptions{mock: mock.Config{Tokens: 4}, front: f.front,
		config: strings.Replace(testConfig, `base_url: "ANTHROPIC"`, `base_url: "PRIMARY"`, 1)}
}

// On the same-protocol path the answer reaches an official SDK client as
// the provider sent it, byte for byte: what the gateway does not model
// (system_fingerprint, service_tier, reasoning tokens, an extension)
// arrives unchanged, and the receipt's usage is the provider's.
func TestRelaySameProtocolAnswerIsTheProvidersBytes(t *testing.T) {
	t.Parallel()
	f := &bytesFront{}
	f.openAI.Store(bytesOpenAIAnswer)
	f.anthropic.Store(bytesAnthropicAnswer)
	inBubble(t, bytesEnv(f), func(t *testing.T, e *env) {
		ctx := context.Background()

		res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
		if res.StatusCode != 200 || string(body) != bytesOpenAIAnswer {
			t.Fatalf("chat: %d\n%s\nwant the provider's bytes\n%s", res.StatusCode, body, bytesOpenAIAnswer)
		}
		var h http.Header
		oc := e.openai(&h)
		cc, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "solo",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is a logical request?")}})
		if err != nil {
			t.Fatal(err)
		}
		if cc.ID != "chatcmpl-upstream-7" || cc.JSON.SystemFingerprint.Raw() != `"fp_upstream_42"` || cc.ServiceTier != "priority" ||
			cc.Usage.CompletionTokensDetails.ReasoningTokens != 7 || cc.JSON.ExtraFields["x_provider"].Raw() != `{"region":"eu-west","shard":3}` {
			t.Fatalf("the OpenAI client read %s", cc.RawJSON())
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if a := r.Attempts[0]; len(r.Attempts) != 1 || a.UsageEstimated ||
			a.Usage != (gw.Usage{InputTokens: 123, OutputTokens: 45, CachedTokens: 100}) {
			t.Fatalf("receipt attempts %+v", r.Attempts)
		}

		res, body = e.post("/v1/messages", `{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"What is a logical request?"}]}`, nil)
		if res.StatusCode != 200 || string(body) != bytesAnthropicAnswer {
			t.Fatalf("messages: %d\n%s\nwant the provider's bytes\n%s", res.StatusCode, body, bytesAnthropicAnswer)
		}
		ac := e.anthropicClient(&h)
		msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is a logical request?"))}})
		if err != nil {
			t.Fatal(err)
		}
		if msg.ID != "msg_upstream_7" || msg.Usage.ServiceTier != "priority" || msg.Usage.ServerToolUse.WebSearchRequests != 2 ||
			msg.Usage.CacheCreation.Ephemeral1hInputTokens != 30 || msg.JSON.ExtraFields["x_provider"].Raw() != `{"region":"eu-west","shard":3}` {
			t.Fatalf("the Anthropic client read %s", msg.RawJSON())
		}
		r = e.receipt(h.Get("X-Oncegate-Request-Id"))
		if a := r.Attempts[0]; len(r.Attempts) != 1 || a.UsageEstimated ||
			a.Usage != (gw.Usage{InputTokens: 150, OutputTokens: 45, CachedTokens: 100, CacheWriteTokens: 30}) {
			t.Fatalf("receipt attempts %+v", r.Attempts)
		}
	})
}

// What the scan leaves to the decoder is read as before: an answer
// without usage has it estimated, and a malformed one is a protocol
// violation whose error is the decoder's, word for word.
func TestRelaySameProtocolAnswerTheScanRefuses(t *testing.T) {
	t.Parallel()
	f := &bytesFront{}
	inBubble(t, bytesEnv(f), func(t *testing.T, e *env) {
		noUsage := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"twelve chars"},"finish_reason":"stop"}]}`
		f.openAI.Store(noUsage)
		res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
		if res.StatusCode != 200 || string(body) != noUsage {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if a := r.Attempts[0]; !a.UsageEstimated || a.Usage.OutputTokens != 3 || a.Usage.InputTokens == 0 {
			t.Fatalf("an answer without usage: attempt %+v", a)
		}

		for _, bad := range []string{
			`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1.5,"completion_tokens":2}}`,
			`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1},"Usage":{"completion_tokens":"2"}}`,
			`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}} trailing`,
		} {
			f.openAI.Store(bad)
			_, err := provider.DecodeResponse(provider.OpenAI, []byte(bad))
			if err == nil {
				t.Fatalf("the decoder reads %s", bad)
			}
			res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
			var eb errorBody
			_ = json.Unmarshal(body, &eb)
			if res.StatusCode != 502 || eb.Error.Code == nil || *eb.Error.Code != api.CodeProtocolViolation {
				t.Fatalf("%s: %d %s", bad, res.StatusCode, body)
			}
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if a := r.Attempts[0]; len(r.Attempts) != 1 || a.Kind != string(gw.KindProtocolViolation) || a.Error == nil ||
				a.Error.Message != truncate(err.Error(), 300) {
				t.Fatalf("%s: attempts %+v, want the error %q", bad, r.Attempts, err)
			}
		}
	})
}
