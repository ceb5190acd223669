package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// OpenAI's n on an OpenAI route: every choice reaches the official SDK,
// JSON and streamed (each chunk's choice with its index), and the
// receipt bills every choice's output — the provider's usage, which the
// mock's own count agrees with — from one upstream call each.
func TestNChoicesAreRelayedAndBilled(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.openai(&h)
		params := oaParams("solo", "two answers please")
		params.N = openai.Int(2)
		res, err := c.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(res.Choices) != 2 || res.Choices[1].Index != 1 || res.Choices[0].Message.Content == res.Choices[1].Message.Content ||
			res.Usage.CompletionTokens != 8 || len(r.Attempts) != 1 || r.Attempts[0].Usage.OutputTokens != 8 || r.Request.Choices != 2 {
			t.Fatalf("n=2 JSON: %d choices, usage %+v, receipt %+v", len(res.Choices), res.Usage, r.Attempts)
		}
		if st := e.primary.Stats(); st.Requests != 1 || st.OutputTokens != 8 {
			t.Fatalf("upstream: %d calls, %d output tokens", st.Requests, st.OutputTokens)
		}

		params = oaParams("solo", "two streamed answers please")
		params.N = openai.Int(2)
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := c.Chat.Completions.NewStreaming(context.Background(), params)
		var acc openai.ChatCompletionAccumulator
		indexes := map[int64]int{}
		for st.Next() {
			ch := st.Current()
			if !acc.AddChunk(ch) {
				t.Fatalf("the SDK accumulator rejected a chunk: %+v", ch)
			}
			for _, choice := range ch.Choices {
				indexes[choice.Index]++
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		r = e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(acc.Choices) != 2 || acc.Choices[0].Message.Content == "" || acc.Choices[1].Message.Content == "" ||
			acc.Choices[0].FinishReason != "stop" || acc.Choices[1].FinishReason != "stop" || acc.Choices[1].Message.Role != "assistant" ||
			indexes[0] != 6 || indexes[1] != 6 || acc.Usage.CompletionTokens != 8 {
			t.Fatalf("n=2 stream: %+v, chunks per choice %v, usage %+v", acc.Choices, indexes, acc.Usage)
		}
		if r.Terminal != string(gw.TerminalSucceeded) || len(r.Attempts) != 1 || r.Attempts[0].Usage.OutputTokens != 8 || r.Totals.BillableTokens != r.Attempts[0].Usage.InputTokens+8 {
			t.Fatalf("n=2 stream receipt: %s %+v %+v", r.Terminal, r.Attempts, r.Totals)
		}
		if st := e.primary.Stats(); st.Requests != 2 || st.OutputTokens != 16 {
			t.Fatalf("upstream: %d calls, %d output tokens", st.Requests, st.OutputTokens)
		}

		// n out of 1…8 is refused by name, with no upstream call.
		for _, n := range []int64{9, 0} {
			p := oaParams("solo", "too many")
			p.N = openai.Int(n)
			_, err := c.Chat.Completions.New(context.Background(), p)
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "n" {
				t.Fatalf("n=%d: %v", n, err)
			}
		}
		if n := e.primary.Stats().Requests; n != 2 {
			t.Fatalf("%d upstream calls after the refusals", n)
		}
	})
}

// A route that cannot carry n (Anthropic) is skipped with the reason
// named, and an OpenAI route serves every choice; with drop_params it
// serves one choice instead, and says n was dropped.
func TestNChoicesSkipOrDropARouteThatCannotCarryThem(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.openai(&h)
		params := oaParams("to-claude", "two answers please")
		params.N = openai.Int(2)
		res, err := c.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(res.Choices) != 2 || h.Get("X-Oncegate-Route") != "fallback" || !strings.Contains(r.Request.IneligibleRoutes["claude"], "n cannot be carried") ||
			e.anthropic.Stats().Requests != 0 || e.fallback.Stats().Requests != 1 {
			t.Fatalf("n=2 on to-claude: %d choices from %s, ineligible %v", len(res.Choices), h.Get("X-Oncegate-Route"), r.Request.IneligibleRoutes)
		}

		res, err = c.Chat.Completions.New(context.Background(), params, option.WithJSONSet("drop_params", true))
		if err != nil {
			t.Fatal(err)
		}
		r = e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(res.Choices) != 1 || h.Get("X-Oncegate-Route") != "claude" || h.Get("X-Oncegate-Dropped") != "n" ||
			len(r.Attempts) != 1 || strings.Join(r.Attempts[0].DroppedFields, ",") != "n" || e.anthropic.Stats().Requests != 1 || e.fallback.Stats().Requests != 1 {
			t.Fatalf("n=2 with drop_params: %d choices from %s, dropped %q, %+v", len(res.Choices), h.Get("X-Oncegate-Route"), h.Get("X-Oncegate-Dropped"), r.Attempts)
		}
	})
}

// A stream of several choices that breaks after output is never resumed
// nor restarted — one choice cannot be continued alone — whatever the
// alias's after_output says: it stops, interrupted, after one attempt.
func TestNChoicesStreamThatBreaksStops(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 3}}))
		var h http.Header
		c := e.openai(&h)
		params := oaParams("chat", "two streamed answers please")
		params.N = openai.Int(2)
		st := c.Chat.Completions.NewStreaming(context.Background(), params)
		chunks := 0
		for st.Next() {
			chunks++
		}
		if st.Err() == nil || chunks == 0 {
			t.Fatalf("the stream ended without an error after %d chunks", chunks)
		}
		r := e.awaitReceipt(h.Get("X-Oncegate-Request-Id"))
		if r.Terminal != string(gw.TerminalIndeterminate) || len(r.Attempts) != 1 || r.Attempts[0].Kind != string(gw.KindStreamInterruptedAfterOutput) ||
			e.primary.Stats().Requests != 1 || e.fallback.Stats().Requests != 0 {
			t.Fatalf("receipt %s %s %+v; upstream %d + %d", r.Terminal, r.Reason, r.Attempts, e.primary.Stats().Requests, e.fallback.Stats().Requests)
		}
	})
}

// An azure-openai route carries n as an openai one does: two choices,
// streamed with their index, billed for both.
func TestNChoicesOnAzureOpenAI(t *testing.T) {
	t.Parallel()
	e, _ := newAzureEnv(t)
	var h http.Header
	c := e.openai(&h)
	params := oaParams("chat", "two answers from azure")
	params.N = openai.Int(2)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Fatalf("the SDK accumulator rejected a chunk: %+v", st.Current())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	r := e.awaitReceipt(h.Get("X-Oncegate-Request-Id"))
	if len(acc.Choices) != 2 || acc.Choices[1].Message.Content == "" || acc.Usage.CompletionTokens != 16 ||
		len(r.Attempts) != 1 || r.Attempts[0].Usage.OutputTokens != 16 || e.primary.Stats().Requests != 1 {
		t.Fatalf("azure n=2: %+v usage %+v, receipt %+v", acc.Choices, acc.Usage, r.Attempts)
	}
}
