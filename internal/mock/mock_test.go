package mock_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/oncegate/oncegate/internal/mock"
)

func start(t *testing.T, cfg mock.Config) (*mock.Mock, string) {
	t.Helper()
	m := mock.New(cfg)
	srv := httptest.NewServer(m)
	t.Cleanup(func() { m.Close(); srv.Close() })
	return m, srv.URL
}

func oaClient(url string) openai.Client {
	return openai.NewClient(oopt.WithBaseURL(url+"/v1"), oopt.WithAPIKey("sk-test"), oopt.WithMaxRetries(0))
}

func anClient(url string) anthropic.Client {
	return anthropic.NewClient(aopt.WithBaseURL(url), aopt.WithAPIKey("sk-ant-test"), aopt.WithMaxRetries(0))
}

const question = "Why does a gateway need one retry owner?"

func TestOpenAISDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30})
	c := oaClient(url)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 30)
	if res.Choices[0].Message.Content != want || res.Choices[0].FinishReason != "stop" || res.Usage.CompletionTokens != 30 {
		t.Fatalf("json answer %q finish %q usage %+v", res.Choices[0].Message.Content, res.Choices[0].FinishReason, res.Usage)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatal("the SDK accumulator rejected a chunk")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != want || acc.Usage.CompletionTokens != 30 || acc.Usage.PromptTokens != res.Usage.PromptTokens {
		t.Fatalf("stream answer %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	// A tool is offered: the mock calls it.
	params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "search", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}})}
	stream = c.Chat.Completions.NewStreaming(ctx, params)
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	tc := acc.Choices[0].Message.ToolCalls
	if len(tc) != 1 || tc[0].Function.Name != "search" || tc[0].Function.Arguments != `{"query": "oncegate receipts"}` || acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool call %+v finish %q", tc, acc.Choices[0].FinishReason)
	}
	if s := m.Stats(); s.Requests != 3 || s.Generations != 3 {
		t.Fatalf("stats %+v", s.Counter)
	}
}

func TestAnthropicSDKAgainstTheMock(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 30})
	c := anClient(url)
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "m", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}}
	res, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 30)
	if len(res.Content) != 1 || res.Content[0].Text != want || res.StopReason != "end_turn" || res.Usage.OutputTokens != 30 {
		t.Fatalf("json answer %+v", res)
	}
	stream := c.Messages.NewStreaming(ctx, params)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != want || msg.Usage.OutputTokens != 30 || msg.StopReason != "end_turn" {
		t.Fatalf("stream answer %+v", msg)
	}
	params.Tools = []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"query": map[string]any{"type": "string"}}}, "search")}
	stream = c.Messages.NewStreaming(ctx, params)
	msg = anthropic.Message{}
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != "search" || string(msg.Content[0].Input) != `{"query": "oncegate receipts"}` || msg.StopReason != "tool_use" {
		t.Fatalf("tool use %+v", msg)
	}
}

func TestContinuationCarriesOnWhereThePrefixEnds(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 40})
	want := mock.AnswerFor(0, question, 40)
	c := oaClient(url)
	for _, cut := range []int{1, 57, len(want) / 2, len(want) - 3} {
		prefix := strings.TrimRight(want[:cut], " \n")
		res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question), openai.AssistantMessage(prefix)}})
		if err != nil {
			t.Fatal(err)
		}
		if got := prefix + res.Choices[0].Message.Content; got != want {
			t.Fatalf("cut %d: prefix + continuation =\n%q\nwant\n%q", cut, got, want)
		}
	}
}

func TestFaultsAndStatsOverHTTP(t *testing.T) {
	m, url := start(t, mock.Config{})
	m.SetScript(mock.Script{Rules: []mock.Rule{
		{Model: "m", Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "1", RetryAfterMS: "250"}},
		{Model: "m", Calls: []int{2}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 529}},
	}})
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	post := func() *http.Response {
		req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	r1 := post()
	var e1 struct {
		Type  string                `json:"type"`
		Error struct{ Type string } `json:"error"`
	}
	_ = json.NewDecoder(r1.Body).Decode(&e1)
	if r1.StatusCode != 429 || r1.Header.Get("Retry-After") != "1" || r1.Header.Get("retry-after-ms") != "250" || e1.Type != "error" || e1.Error.Type != "rate_limit_error" {
		t.Fatalf("429: %d %v %+v", r1.StatusCode, r1.Header, e1)
	}
	r2 := post()
	_ = json.NewDecoder(r2.Body).Decode(&e1)
	if r2.StatusCode != 529 || e1.Error.Type != "overloaded_error" {
		t.Fatalf("529: %d %+v", r2.StatusCode, e1)
	}
	if r3 := post(); r3.StatusCode != 200 {
		t.Fatalf("third call: %d", r3.StatusCode)
	}
	res, err := http.Get(url + "/mock/stats")
	if err != nil {
		t.Fatal(err)
	}
	var s mock.Stats
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	k := s.ByIdempotencyKey["k1"]
	if s.Requests != 3 || k.Requests != 3 || k.Generations != 1 || k.OutputTokens != 5 || k.InputTokens == 0 {
		t.Fatalf("stats %+v key %+v", s.Counter, k)
	}
}

// A flapping route: down for the first ForMS milliseconds, then healthy.
func TestFlappingRoute(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 3})
	m.SetScript(mock.Script{Rules: []mock.Rule{{ForMS: 200, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	post := func() int {
		res, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	if got := post(); got != 503 {
		t.Fatalf("during the outage: %d", got)
	}
	time.Sleep(250 * time.Millisecond)
	if got := post(); got != 200 {
		t.Fatalf("after the outage: %d", got)
	}
}
