package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

var searchSchema = map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}

const wantArgs = `{"query": "oncegate receipts"}`

// An OpenAI SDK caller served by an Anthropic route: JSON and streaming,
// plain text and a tool call, then the tool result sent back.
func TestOpenAISDKOverAnAnthropicRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 16}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.openai(&h)
		ctx := context.Background()
		params := openai.ChatCompletionNewParams{Model: "claude", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Be brief."), openai.UserMessage(prompt)}}
		res, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != "claude-model" || res.Choices[0].FinishReason != "stop" || res.Usage.CompletionTokens != 16 || res.Choices[0].Message.Content == "" {
			t.Fatalf("translated response %+v", res)
		}
		if !strings.HasPrefix(res.ID, "chatcmpl-") || e.anthropic.Stats().Generations != 1 {
			t.Fatalf("id %q, anthropic generations %d", res.ID, e.anthropic.Stats().Generations)
		}
		streamed := ""
		st := c.Chat.Completions.NewStreaming(ctx, params)
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) > 0 {
				streamed += ch.Choices[0].Delta.Content
			}
		}
		if err := st.Err(); err != nil || streamed != res.Choices[0].Message.Content {
			t.Fatalf("stream %q vs json %q (%v)", streamed, res.Choices[0].Message.Content, err)
		}

		params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "search", Parameters: searchSchema})}
		st = c.Chat.Completions.NewStreaming(ctx, params)
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
		if len(calls) != 1 || calls[0].Function.Name != "search" || calls[0].Function.Arguments != wantArgs || acc.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("tool call %+v finish %q", calls, acc.Choices[0].FinishReason)
		}
		// Send the tool result back: the Anthropic route must see a tool_result
		// and answer with text.
		params.Messages = append(params.Messages, acc.Choices[0].Message.ToParam(), openai.ToolMessage("3 receipts found", calls[0].ID))
		res, err = c.Chat.Completions.New(ctx, params)
		if err != nil || res.Choices[0].FinishReason != "stop" || res.Choices[0].Message.Content == "" {
			t.Fatalf("after the tool result: %+v %v", res, err)
		}
		e.receipt(h.Get("X-Oncegate-Request-Id"))
	})
}

// An Anthropic SDK caller served by an OpenAI route.
func TestAnthropicSDKOverAnOpenAIRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 16}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.anthropicClient(&h)
		ctx := context.Background()
		params := anthropic.MessageNewParams{Model: "chat", MaxTokens: 100,
			System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
		res, err := c.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != "primary-model" || res.StopReason != "end_turn" || res.Usage.OutputTokens != 16 || len(res.Content) != 1 || !strings.HasPrefix(res.ID, "msg_") {
			t.Fatalf("translated response %+v", res)
		}
		st := c.Messages.NewStreaming(ctx, params)
		var msg anthropic.Message
		for st.Next() {
			if err := msg.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil || msg.Content[0].Text != res.Content[0].Text || msg.Usage.OutputTokens != 16 {
			t.Fatalf("stream %+v vs json %q (%v)", msg, res.Content[0].Text, err)
		}

		params.Tools = []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: searchSchema["properties"]}, "search")}
		st = c.Messages.NewStreaming(ctx, params)
		msg = anthropic.Message{}
		for st.Next() {
			if err := msg.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != "search" || string(msg.Content[0].Input) != wantArgs || msg.StopReason != "tool_use" {
			t.Fatalf("tool use %+v stop %q", msg.Content, msg.StopReason)
		}
		params.Messages = append(params.Messages, msg.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[0].ID, "3 receipts found", false)))
		res, err = c.Messages.New(ctx, params)
		if err != nil || res.StopReason != "end_turn" || res.Content[0].Text == "" {
			t.Fatalf("after the tool result: %+v %v", res, err)
		}
		if r := e.receipt(h.Get("X-Oncegate-Request-Id")); r.Operation != "messages" || r.Attempts[0].Provider != "mock-primary" {
			t.Fatalf("receipt %s %+v", r.Operation, r.Attempts)
		}
		if want := answer(t, provider.Anthropic, prompt, 16); want == "" {
			t.Fatal("no reference answer")
		}
	})
}

// A hanging upstream with a 700 ms caller budget: 504 within the budget
// plus a small margin, and no attempt starts after the deadline.
func TestCallerDeadlineBoundsEverything(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))
		e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))
		start := time.Now()
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{"X-Oncegate-Timeout-Ms": "700"})
		elapsed := time.Since(start)
		if res.StatusCode != 504 || !strings.Contains(string(body), api.CodeDeadline) || res.Header.Get("x-should-retry") != "false" {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
		if elapsed > 700*time.Millisecond+250*time.Millisecond {
			t.Fatalf("answered after %v, budget 700ms", elapsed)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if r.Deadline.Sub(r.CreatedAt) != 700*time.Millisecond || r.Terminal != "deadline" {
			t.Fatalf("deadline %v terminal %s", r.Deadline.Sub(r.CreatedAt), r.Terminal)
		}
		for _, a := range r.Attempts {
			if !a.StartedAt.Before(r.Deadline) {
				t.Fatalf("attempt %d started at the deadline or after", a.Ordinal)
			}
		}
		// The official SDK's own timeout (x-stainless-timeout, seconds) bounds
		// the deadline too.
		e.primary.SetScript(mock.Script{})
		var h http.Header
		client := e.openai(&h)
		if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("x")},
			optTimeout(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		if r := e.receipt(h.Get("X-Oncegate-Request-Id")); r.Deadline.Sub(r.CreatedAt) != 3*time.Second {
			t.Fatalf("deadline %v, want the SDK's 3s", r.Deadline.Sub(r.CreatedAt))
		}
	})
}

// ticking is a clock that moves a step every time it is read: whatever a
// request does between deciding an attempt and sending it takes time.
type ticking struct {
	mu   sync.Mutex
	n    time.Duration
	step time.Duration
}

func (c *ticking) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += c.step
	return time.Now().Add(c.n)
}

// No attempt leaves after the deadline: an attempt decided in time whose
// durable commit ended past the deadline is not sent; the request ends
// 504 deadline_exceeded with no attempt, and its receipt verifies.
func TestNoAttemptIsSentAfterTheDeadline(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, clock: &ticking{step: time.Millisecond}}, func(t *testing.T, e *env) {
		for i := range 5 {
			res, body := e.post("/v1/chat/completions", distinctBody("chat", i, ""), map[string]string{"X-Oncegate-Timeout-Ms": "1"})
			if res.StatusCode != 504 || !strings.Contains(string(body), api.CodeDeadline) || res.Header.Get("X-Oncegate-Attempts") != "0" {
				t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
			}
			if r := e.receipt(res.Header.Get("X-Oncegate-Request-Id")); r.Terminal != "deadline" || len(r.Attempts) != 0 {
				t.Fatalf("receipt %d: %+v", i, r)
			}
		}
		if n := e.primary.Stats().Requests + e.fallback.Stats().Requests; n != 0 {
			t.Fatalf("%d attempts reached a provider after their deadline", n)
		}
	})
}

// A field a translation cannot carry keeps the request on routes of its
// own protocol — unless the alias (may_drop) or the request
// (X-Oncegate-May-Drop) lets routes of the other protocol drop it: then
// the Anthropic fallback serves an OpenAI client that sent metadata or a
// seed, and the receipt and X-Oncegate-Dropped say what it dropped.
func TestDroppableFieldsKeepAFallbackOnTheOtherProtocol(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		withMetadata := func(model string, i int) string {
			return distinctBody(model, i, `,"metadata":{"team":"search"}`)
		}
		// Strict by default: the Anthropic route is not tried.
		res, body := e.post("/v1/chat/completions", withMetadata("chat-pair", 1), nil)
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if res.StatusCode != 503 || !strings.Contains(r.Request.IneligibleRoutes["claude"], "metadata") || e.anthropic.Stats().Requests != 0 {
			t.Fatalf("metadata without may_drop: %d %s %+v", res.StatusCode, body, r.Request.IneligibleRoutes)
		}
		// The request allows dropping it: the fallback serves.
		res, body = e.post("/v1/chat/completions", withMetadata("chat-pair", 2), map[string]string{"X-Oncegate-May-Drop": "metadata"})
		r = e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		last := r.Attempts[len(r.Attempts)-1]
		if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dropped") != "metadata" || last.Route != "claude" ||
			fmt.Sprint(last.DroppedFields) != "[metadata]" || fmt.Sprint(r.Request.DroppableFields) != "[metadata]" || len(r.Attempts[0].DroppedFields) != 0 {
			t.Fatalf("metadata with X-Oncegate-May-Drop: %d %s dropped %q %+v", res.StatusCode, body, res.Header.Get("X-Oncegate-Dropped"), r.Attempts)
		}
		// The alias allows dropping a seed; the official SDK reads the
		// answer.
		var h http.Header
		c := e.openai(&h)
		p := oaParams("chat-pair-drop", "seeded question")
		p.Seed = openai.Int(7)
		if _, err := c.Chat.Completions.New(context.Background(), p); err != nil || h.Get("X-Oncegate-Dropped") != "seed" {
			t.Fatalf("seed with may_drop: %v, dropped %q", err, h.Get("X-Oncegate-Dropped"))
		}
		// Only droppable fields may be named.
		res, body = e.post("/v1/chat/completions", withMetadata("chat-pair", 3), map[string]string{"X-Oncegate-May-Drop": "metadata, temperature"})
		if res.StatusCode != 400 || !strings.Contains(string(body), `\"temperature\"`) || !strings.Contains(string(body), "X-Oncegate-May-Drop") {
			t.Fatalf("a field that cannot be dropped: %d %s", res.StatusCode, body)
		}
	})
}
