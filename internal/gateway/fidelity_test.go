package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// A streamed answer with extended thinking reaches the Anthropic SDK with
// its thinking block and signature, not only its text.
func TestStreamedThinkingReachesTheClient(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8}}, func(t *testing.T, e *env) {
		msg, h := e.streamAnthropic(anthropic.MessageNewParams{Model: "claude", MaxTokens: 2048,
			Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != mock.ThinkingText() ||
			!strings.HasPrefix(msg.Content[0].Signature, "sig-mock") || msg.Content[1].Type != "text" ||
			msg.Content[1].Text != answer(t, provider.Anthropic, prompt, 8) {
			t.Fatalf("content %+v", msg.Content)
		}
		if r := e.receipt(h.Get("X-Oncegate-Request-Id")); !r.Request.NoContinuation || r.Terminal != "succeeded" {
			t.Fatalf("receipt %+v %s", r.Request, r.Terminal)
		}
	})
}

// A thinking answer cannot be continued by prefill: a stream that breaks
// after output ends in-band, never sends a continuation the provider
// would refuse.
func TestAThinkingStreamIsNotContinued(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8}}, func(t *testing.T, e *env) {
		e.anthropic.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 3})))
		res, body := e.post("/v1/messages", `{"model":"claude","max_tokens":2048,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},`+
			`"messages":[{"role":"user","content":"hi"}]}`, nil)
		if res.StatusCode != 200 || !strings.Contains(string(body), "event: error") || !strings.Contains(string(body), "thinking_delta") {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		id := res.Header.Get("X-Oncegate-Request-Id")
		if _, _, a := e.upstreamCalls(id); a.Requests != 1 || a.Continuations != 0 {
			t.Fatalf("claude %+v: no continuation may be sent", a)
		}
		if r := e.receipt(id); len(r.Attempts) != 1 || r.Terminal != "indeterminate" {
			t.Fatalf("receipt %s %+v", r.Terminal, r.Attempts)
		}
	})
}

// Log probabilities of a streamed answer reach the OpenAI SDK.
func TestStreamedLogprobsReachTheClient(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6}}, func(t *testing.T, e *env) {
		c := e.openai(nil)
		st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
			Messages: userMsg(prompt), Logprobs: openai.Bool(true)})
		var tokens []string
		var text strings.Builder
		for st.Next() {
			ch := st.Current()
			if len(ch.Choices) == 0 {
				continue
			}
			text.WriteString(ch.Choices[0].Delta.Content)
			for _, lp := range ch.Choices[0].Logprobs.Content {
				if lp.Logprob != -0.25 {
					t.Fatalf("logprob %v", lp.Logprob)
				}
				tokens = append(tokens, lp.Token)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if want := answer(t, provider.OpenAI, prompt, 6); text.String() != want || strings.Join(tokens, "") != want || len(tokens) != 6 {
			t.Fatalf("text %q, tokens with log probabilities %q", text.String(), tokens)
		}
	})
}
