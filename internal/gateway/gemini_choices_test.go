package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// geminiRoutes are the aliases served by the Gemini API and by Gemini on
// Vertex, with their models (the mock counts calls per model).
var geminiRoutes = []struct{ alias, model string }{{"gemini", "gemini-2.5-flash"}, {"vertex-gemini", "gemini-2.5-pro"}}

// OpenAI's n on a Gemini route and a Vertex Gemini route: one
// generateContent call with candidateCount, every candidate a choice by
// its index, JSON and streamed through the official SDK; the receipt
// bills every choice's output — the usage the mock reported, which its
// own count agrees with — and records request.choices.
func TestNChoicesOnGeminiRoutes(t *testing.T) {
	t.Parallel()
	const tokens = 5
	g := newGoogleEnv(t, tokens)
	ctx := context.Background()
	for _, c := range geminiRoutes {
		var h http.Header
		client := g.openai(&h)
		params := oaParams(c.alias, "two answers please")
		params.N = openai.Int(2)
		res, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v", c.alias, err)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := g.receipt(id)
		up := g.mock.Stats().ByRequestID[id]
		if len(res.Choices) != 2 || res.Choices[0].Index != 0 || res.Choices[1].Index != 1 || res.Choices[0].Message.Content == "" ||
			res.Choices[1].Message.Content == "" || res.Choices[0].Message.Content == res.Choices[1].Message.Content ||
			res.Choices[0].FinishReason != "stop" || res.Choices[1].FinishReason != "stop" {
			t.Fatalf("%s n=2 JSON: %+v", c.alias, res.Choices)
		}
		if res.Usage.CompletionTokens != 2*tokens || up.Requests != 1 || len(r.Attempts) != 1 || r.Request.Choices != 2 ||
			r.Attempts[0].Usage.OutputTokens != up.OutputTokens || r.Attempts[0].Usage.OutputTokens != res.Usage.CompletionTokens ||
			r.Attempts[0].Usage.InputTokens != res.Usage.PromptTokens || r.Attempts[0].UsageEstimated {
			t.Fatalf("%s n=2 JSON: usage %+v, upstream %+v, receipt choices %d %+v", c.alias, res.Usage, up, r.Request.Choices, r.Attempts)
		}

		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		chunks := map[int64]int{}
		for st.Next() {
			ch := st.Current()
			if !acc.AddChunk(ch) {
				t.Fatalf("%s: the SDK accumulator rejected a chunk: %+v", c.alias, ch)
			}
			for _, choice := range ch.Choices {
				chunks[choice.Index]++
			}
		}
		if err := st.Err(); err != nil {
			t.Fatalf("%s stream: %v", c.alias, err)
		}
		id = h.Get("X-Oncegate-Request-Id")
		r = g.awaitReceipt(id)
		up = g.mock.Stats().ByRequestID[id]
		// Each choice: its role chunk, a chunk per token, its finish.
		if len(acc.Choices) != 2 || acc.Choices[0].Index != 0 || acc.Choices[1].Index != 1 || acc.Choices[1].Message.Role != "assistant" ||
			acc.Choices[0].Message.Content != res.Choices[0].Message.Content || acc.Choices[1].Message.Content != res.Choices[1].Message.Content ||
			acc.Choices[0].FinishReason != "stop" || acc.Choices[1].FinishReason != "stop" || chunks[0] != tokens+2 || chunks[1] != tokens+2 {
			t.Fatalf("%s n=2 stream: %+v, chunks per choice %v", c.alias, acc.Choices, chunks)
		}
		if acc.Usage.CompletionTokens != 2*tokens || up.Requests != 1 || up.OutputTokens != 2*tokens || r.Terminal != string(gw.TerminalSucceeded) ||
			len(r.Attempts) != 1 || r.Attempts[0].Usage.OutputTokens != up.OutputTokens || r.Attempts[0].UsageEstimated || r.Request.Choices != 2 {
			t.Fatalf("%s n=2 stream: usage %+v, upstream %+v, receipt %s choices %d %+v", c.alias, acc.Usage, up, r.Terminal, r.Request.Choices, r.Attempts)
		}
		if n := g.calls(c.model); n != 2 {
			t.Fatalf("%s: %d upstream calls for two requests", c.alias, n)
		}
	}
}

// A stream of two Gemini candidates cut after output is neither resumed
// nor restarted, though the alias has another route: it stops,
// interrupted, after one upstream call, billed every token the client was
// shown — exactly what the mock generated.
func TestNChoicesGeminiStreamCutIsNotResumed(t *testing.T) {
	t.Parallel()
	const cut = 3
	g := newGoogleEnvWith(t, 8, `
  - {name: vertex-gemini-or-openai, routes: [vertex-gemini, openai], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
`)
	for _, c := range []struct{ alias, model string }{{"gemini-or-openai", "gemini-2.5-flash"}, {"vertex-gemini-or-openai", "gemini-2.5-pro"}} {
		g.mock.SetScript(rules(mock.Rule{Model: c.model, Fault: mock.Fault{Type: mock.FaultDropAfter, After: cut}}))
		var h http.Header
		params := oaParams(c.alias, "two streamed answers please")
		params.N = openai.Int(2)
		client := g.openai(&h)
		st := client.Chat.Completions.NewStreaming(context.Background(), params)
		shown := map[int64]int64{}
		for st.Next() {
			for _, ch := range st.Current().Choices {
				if ch.Delta.Content != "" {
					shown[ch.Index]++
				}
			}
		}
		if st.Err() == nil || shown[0] != cut || shown[1] != cut {
			t.Fatalf("%s: the stream ended with error %v after %v tokens per choice", c.alias, st.Err(), shown)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := g.awaitReceipt(id)
		up := g.mock.Stats().ByRequestID[id]
		if r.Terminal != string(gw.TerminalIndeterminate) || len(r.Attempts) != 1 || r.Request.Choices != 2 {
			t.Fatalf("%s: receipt %s %s choices %d %+v", c.alias, r.Terminal, r.Reason, r.Request.Choices, r.Attempts)
		}
		a := r.Attempts[0]
		if a.Kind != string(gw.KindStreamInterruptedAfterOutput) || a.EmittedTokens != 2*cut || a.Usage.OutputTokens < 2*cut ||
			a.Usage.OutputTokens != up.OutputTokens || up.Requests != 1 || g.calls(c.model) != 1 || g.calls("gpt-openai") != 0 {
			t.Fatalf("%s: attempt %s shown %d billed %+v; upstream %+v, %d calls to openai", c.alias, a.Kind, a.EmittedTokens, a.Usage, up, g.calls("gpt-openai"))
		}
	}
}

// A prompt Gemini refuses outright (promptFeedback, no candidates) ends
// every choice at once: the client asked for two and reads one refusal
// with content_filter, streamed and JSON, a complete answer from one
// upstream call each — not a stream left waiting for its second choice.
func TestNChoicesGeminiPromptBlocked(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 6)
	g.mock.SetScript(rules(mock.Rule{Model: "gemini-2.5-flash", Fault: mock.Fault{Type: mock.FaultContentPolicy}}))
	var h http.Header
	client := g.openai(&h)
	params := oaParams("gemini", "two answers please")
	params.N = openai.Int(2)
	st := client.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Fatalf("the SDK accumulator rejected a chunk: %+v", st.Current())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	r := g.awaitReceipt(h.Get("X-Oncegate-Request-Id"))
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "content_filter" || acc.Choices[0].Message.Refusal == "" ||
		r.Terminal != string(gw.TerminalSucceeded) || len(r.Attempts) != 1 || r.Request.Choices != 2 {
		t.Fatalf("blocked n=2 stream: %+v; receipt %s %+v", acc.Choices, r.Terminal, r.Attempts)
	}
	res, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Choices[0].FinishReason != "content_filter" || res.Choices[0].Message.Refusal == "" {
		t.Fatalf("blocked n=2 JSON: %+v", res.Choices)
	}
	if n := g.calls("gemini-2.5-flash"); n != 2 {
		t.Fatalf("%d upstream calls for two requests", n)
	}
}

// A candidate the request did not ask for (index 2 of n=2) is never
// relayed: the client reads its two choices, and the receipt counts the
// stray chunks as protocol warnings.
func TestNChoicesGeminiStrayCandidateIsSkipped(t *testing.T) {
	t.Parallel()
	g := newGoogleEnv(t, 4)
	g.setFront(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "gemini-2.5-flash:streamGenerateContent") {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, chunk := range []string{
			`{"candidates":[{"content":{"role":"model","parts":[{"text":"A"}]}},{"index":1,"content":{"role":"model","parts":[{"text":"B"}]}},{"index":2,"content":{"role":"model","parts":[{"text":"C"}]}}],"usageMetadata":{"promptTokenCount":5},"responseId":"r1"}`,
			`{"candidates":[{"index":2,"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":3},"responseId":"r1"}`,
			`{"candidates":[{"finishReason":"STOP"},{"index":1,"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":3,"totalTokenCount":8},"responseId":"r1"}`,
		} {
			_, _ = w.Write([]byte("data: " + chunk + "\r\n\r\n"))
		}
		return true
	})
	var h http.Header
	client := g.openai(&h)
	params := oaParams("gemini", "two answers please")
	params.N = openai.Int(2)
	st := client.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Fatalf("the SDK accumulator rejected a chunk: %+v", st.Current())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	r := g.awaitReceipt(h.Get("X-Oncegate-Request-Id"))
	if len(acc.Choices) != 2 || acc.Choices[0].Message.Content != "A" || acc.Choices[1].Message.Content != "B" ||
		acc.Choices[1].FinishReason != "stop" || len(r.Attempts) != 1 || r.Attempts[0].ProtocolWarnings != 2 || r.Attempts[0].Usage.OutputTokens != 3 {
		t.Fatalf("choices %+v; attempts %+v", acc.Choices, r.Attempts)
	}
}
