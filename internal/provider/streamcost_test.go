package provider

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
)

// upstreamStream writes a provider's stream of protocol p: n text deltas
// of a few words between its opening and closing events, as OpenAI and
// Anthropic send them (with usage, as the gateway asks).
func upstreamStream(p Protocol, n int) []byte {
	var b bytes.Buffer
	if p == OpenAI {
		head := `data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":`
		b.WriteString(head + `{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
		for i := range n {
			b.WriteString(head + `{"content":" word` + strconv.Itoa(i) + ` and more"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
		}
		b.WriteString(head + `{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n")
		b.WriteString(`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":` +
			strconv.Itoa(n) + `,"total_tokens":40}}` + "\n\ndata: [DONE]\n\n")
		return b.Bytes()
	}
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_up1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word" + strconv.Itoa(i) + " and more\"}}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":" + strconv.Itoa(n) + "}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

// BenchmarkSameProtocolStream: the provider work of relaying one
// same-protocol stream of 64 text deltas, per stream. decode reads and
// decodes every event (what the relay needs to know: text, tokens, tool
// state, finish, usage); decode+encode adds writing them for the client,
// which is today's relay; decode+rewrite adds instead what relaying the
// upstream's chunks as they are would still cost on OpenAI's protocol —
// the stream's id and created replaced in every chunk — the lower bound of
// a verbatim relay.
func BenchmarkSameProtocolStream(b *testing.B) {
	for _, p := range []Protocol{OpenAI, Anthropic} {
		body := upstreamStream(p, 64)
		run := func(b *testing.B, each func(dst []byte, enc Encoder, data []byte, evs []Event) []byte) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var dst []byte
			var evs []Event
			for b.Loop() {
				rd := SSEStream(bytes.NewReader(body), NewDecoder(p))
				enc := NewEncoder(p, "chatcmpl-og0194", 1767225600, "gpt-4o-2024-08-06")
				dst = enc.Start(dst[:0], 12)
				for {
					var err error
					evs, err = rd.Next(evs[:0])
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					dst = each(dst, enc, nil, evs)
				}
			}
		}
		b.Run(string(p)+"/decode", func(b *testing.B) {
			run(b, func(dst []byte, _ Encoder, _ []byte, _ []Event) []byte { return dst })
		})
		b.Run(string(p)+"/decode+encode", func(b *testing.B) {
			run(b, func(dst []byte, enc Encoder, _ []byte, evs []Event) []byte {
				for i := range evs {
					switch e := &evs[i]; e.Kind {
					case EvText:
						dst = enc.Text(dst, e.Text)
					case EvFinish:
						dst = enc.Finish(dst, e.Finish, gw.Usage{}, false)
					}
				}
				return dst
			})
		})
	}
	// The rewrite a verbatim relay would still do, per OpenAI chunk.
	chunk := []byte(`{"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":" word7 and more"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	enc := NewEncoder(OpenAI, "chatcmpl-og0194", 1767225600, "gpt-4o-2024-08-06")
	b.Run("openai/chunk/encode", func(b *testing.B) {
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			dst = enc.Text(dst[:0], " word7 and more")
		}
	})
	b.Run("openai/chunk/rewrite", func(b *testing.B) {
		b.ReportAllocs()
		id, created := []byte(`"chatcmpl-og0194"`), []byte("1767225600")
		for b.Loop() {
			var buf [16]memberSpan
			ms, ok := splitMembers(chunk, buf[:])
			if !ok {
				b.Fatal("split")
			}
			_ = rewriteMembers(chunk, ms, []memberEdit{{"id", id}, {"created", created}, {"usage", nil}})
		}
	})
}
