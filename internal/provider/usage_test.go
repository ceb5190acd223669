package provider

import (
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// Usage carries the prompt-cache counts of both protocols: OpenAI's
// prompt_tokens_details.cached_tokens (reads; it reports no writes), and
// Anthropic's cache_read_input_tokens and cache_creation_input_tokens,
// folded into input_tokens as receipts count every prompt token — in
// whole answers and in streams, whether the counts come with
// message_start (as Anthropic sends them) or message_delta.
func TestUsageCarriesCacheReadsAndWrites(t *testing.T) {
	t.Parallel()
	whole := []struct {
		name  string
		proto Protocol
		body  string
		want  gw.Usage
	}{
		{"openai", OpenAI, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":120,"completion_tokens":5,"total_tokens":125,"prompt_tokens_details":{"cached_tokens":100}}}`,
			gw.Usage{InputTokens: 120, OutputTokens: 5, CachedTokens: 100}},
		{"anthropic", Anthropic, `{"id":"m1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",
			"usage":{"input_tokens":20,"cache_creation_input_tokens":30,"cache_read_input_tokens":100,"output_tokens":5}}`,
			gw.Usage{InputTokens: 150, OutputTokens: 5, CachedTokens: 100, CacheWriteTokens: 30}},
	}
	for _, c := range whole {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeResponse(c.proto, []byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if r.Usage != c.want {
				t.Fatalf("usage %+v, want %+v", r.Usage, c.want)
			}
		})
	}
	streams := []struct {
		name   string
		proto  Protocol
		events []sse.Event
		want   gw.Usage
	}{
		{"openai stream", OpenAI, []sse.Event{{Data: []byte(`{"id":"c1","object":"chat.completion.chunk","model":"m","choices":[],` +
			`"usage":{"prompt_tokens":120,"completion_tokens":5,"total_tokens":125,"prompt_tokens_details":{"cached_tokens":100}}}`)}},
			gw.Usage{InputTokens: 120, OutputTokens: 5, CachedTokens: 100}},
		{"anthropic stream, counts at the start", Anthropic, []sse.Event{
			{Type: "message_start", Data: []byte(`{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"m","content":[],` +
				`"usage":{"input_tokens":20,"cache_creation_input_tokens":30,"cache_read_input_tokens":100,"output_tokens":1}}}`)},
			{Type: "message_delta", Data: []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`)}},
			gw.Usage{InputTokens: 150, OutputTokens: 5, CachedTokens: 100, CacheWriteTokens: 30}},
		{"anthropic stream, counts at the end", Anthropic, []sse.Event{
			{Type: "message_start", Data: []byte(`{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"m","content":[],` +
				`"usage":{"input_tokens":150,"output_tokens":1}}}`)},
			{Type: "message_delta", Data: []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},` +
				`"usage":{"input_tokens":20,"cache_creation_input_tokens":30,"cache_read_input_tokens":100,"output_tokens":5}}`)}},
			gw.Usage{InputTokens: 150, OutputTokens: 5, CachedTokens: 100, CacheWriteTokens: 30}},
	}
	for _, c := range streams {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder(c.proto)
			var last gw.Usage
			for _, ev := range c.events {
				out, err := d.Decode(ev, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range out {
					if e.Kind == EvUsage {
						last = e.Usage
					}
				}
			}
			if last != c.want {
				t.Fatalf("usage %+v, want %+v", last, c.want)
			}
		})
	}
}

// An Anthropic client is told the cache counts apart, as Anthropic itself
// reports them: input_tokens without them.
func TestAnthropicClientsGetTheCacheCountsApart(t *testing.T) {
	t.Parallel()
	u := gw.Usage{InputTokens: 150, OutputTokens: 5, CachedTokens: 100, CacheWriteTokens: 30}
	r, err := DecodeResponse(Anthropic, EncodeResponse(Anthropic, &Response{Model: "m", Text: "hi", Finish: FinishStop, Usage: u}, "msg_1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage != u {
		t.Fatalf("round trip: %+v, want %+v", r.Usage, u)
	}
}
