package gateway

import (
	"context"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

func TestSmokeOpenAIJSONAndStream(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 12}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.openai(&h)
		res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hello")})
		if err != nil {
			t.Fatal(err)
		}
		want := answer(t, provider.OpenAI, "hello", 12)
		if res.Choices[0].Message.Content != want {
			t.Fatalf("got %q want %q", res.Choices[0].Message.Content, want)
		}
		if h.Get("Content-Length") == "" || h.Get("Transfer-Encoding") != "" {
			t.Fatalf("a whole JSON answer goes with its length, not chunked: %v", h)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := e.receipt(id)
		t.Logf("headers %v receipt attempts %d terminal %s", h, len(r.Attempts), r.Terminal)
		st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hello")})
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != want {
			t.Fatalf("stream got %q", acc.Choices[0].Message.Content)
		}
		if h.Get("Content-Length") != "" {
			t.Fatalf("a stream has no length: %v", h)
		}
		t.Logf("stream headers %v", h)
		e.receipt(h.Get("X-Oncegate-Request-Id"))
	})
}
