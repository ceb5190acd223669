package provider

import (
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
)

// Answers as providers send them, with members the wire types do not
// model (service_tier, annotations, server_tool_use …).
var (
	scanOpenAI = `{
  "id": "chatcmpl-B9MHDbslfsbnE8E3wCj5ZoOvS2iL1",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "A logical request is one user action: the gateway may send it upstream several times, and answers it once.\n\n\"Idempotency\" \u2014 caf\u00e9 ✓",
        "refusal": null,
        "annotations": [],
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"receipts\"}"}}]
      },
      "logprobs": {"content": [{"token": "A", "logprob": -0.0012, "bytes": [65], "top_logprobs": []}]},
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_b705f0c291",
  "x_provider": {"region": "eu-west", "weights": [1, 2.5e-3, -0, true, false, null]}
}`
	scanAnthropic = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",
"content":[{"type":"thinking","thinking":"Let me think.","signature":"EqQBCgIYAhIM"},{"type":"text","text":"Hi! My name is Claude.","citations":null},
{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location":"San Francisco, CA","unit":["c",1]}},
{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"weather"}},
{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://example.com","title":"x","encrypted_content":"abc","page_age":null}]}],
"stop_reason":"tool_use","stop_sequence":null,"container":null,
"usage":{"input_tokens":2095,"cache_creation_input_tokens":12,"cache_read_input_tokens":1800,"cache_creation":{"ephemeral_5m_input_tokens":12,"ephemeral_1h_input_tokens":0},"output_tokens":503,"server_tool_use":{"web_search_requests":1},"service_tier":"standard"}}`
	scanEmbeddings = `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292,-0.0028842222,1e-7,-1E+2]},{"object":"embedding","index":1,"embedding":[0.5,0]}],
"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`
)

// scanAgrees checks the scan's promise on one body: when it vouches for
// the body, DecodeResponse reads it without error and the same usage.
// It returns whether the scan vouched.
func scanAgrees(t testing.TB, p Protocol, body []byte) bool {
	t.Helper()
	u, ok := ScanResponse(p, body)
	if !ok {
		if u != (gw.Usage{}) {
			t.Fatalf("%s: a refused body has usage %+v", p, u)
		}
		return false
	}
	r, err := DecodeResponse(p, body)
	if err != nil {
		t.Fatalf("%s: the scan vouched for a body DecodeResponse refuses (%v):\n%s", p, err, body)
	}
	if r.Usage != u {
		t.Fatalf("%s: scanned usage %+v, decoded %+v:\n%s", p, u, r.Usage, body)
	}
	return true
}

// The answers providers send are scanned, with the usage DecodeResponse
// reads.
func TestScanReadsTheUsageDecodeReads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    Protocol
		body string
		want gw.Usage
	}{
		{OpenAI, scanOpenAI, gw.Usage{InputTokens: 1117, OutputTokens: 46, CachedTokens: 1024}},
		{Anthropic, scanAnthropic, gw.Usage{InputTokens: 2095 + 12 + 1800, OutputTokens: 503, CachedTokens: 1800, CacheWriteTokens: 12}},
		{Embeddings, scanEmbeddings, gw.Usage{InputTokens: 8}},
		{OpenAI, `{"choices":[null],"usage":{"prompt_tokens":-3,"completion_tokens":0,"prompt_tokens_details":null}}`, gw.Usage{InputTokens: -3}},
		{Anthropic, ` {"type":"message","content":null,"usage":{"output_tokens":1},"Unrelated":{"TYPE":1}} `, gw.Usage{OutputTokens: 1}},
	} {
		if !scanAgrees(t, c.p, []byte(c.body)) {
			t.Fatalf("%s: the scan refused %s", c.p, c.body)
		}
		if u, _ := ScanResponse(c.p, []byte(c.body)); u != c.want {
			t.Fatalf("%s: usage %+v, want %+v", c.p, u, c.want)
		}
	}
}

// What the scan cannot vouch for is left to DecodeResponse: malformed
// bodies, members of the wrong type, keys that only fold to a member's
// name, repeated members, and answers without usage (whose output the
// gateway estimates from the decoded text).
func TestScanLeavesWhatItCannotVouchForToDecode(t *testing.T) {
	t.Parallel()
	oa := func(s string) string { return `{"choices":[{"message":{"content":"hi"}}],` + s + `}` }
	an := func(s string) string { return `{"type":"message","content":[],` + s + `}` }
	for _, c := range []struct {
		p    Protocol
		body string
	}{
		{OpenAI, ``},
		{OpenAI, `null`},
		{OpenAI, `[]`},
		{OpenAI, `{"choices":[],"usage":{"prompt_tokens":1}}`},
		{OpenAI, `{"usage":{"prompt_tokens":1}}`},
		{OpenAI, oa(`"usage":{"prompt_tokens":1}} `)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1}`) + `x`},
		{OpenAI, oa(`"usage":null`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":0,"completion_tokens":0}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1.5}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1e3}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":"7"}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":12345678901234567890}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":01}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"Usage":{"prompt_tokens":2}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"us\u0061ge":{"prompt_tokens":2}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"uſage":{"prompt_tokens":2}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"created":"today"`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"id":7`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"choices":[]`)},
		{OpenAI, `{"choices":[{"message":{"content":["parts"]}}],"usage":{"prompt_tokens":1}}`},
		{OpenAI, `{"choices":[{"message":{"tool_calls":[{"function":{"arguments":{}}}]}}],"usage":{"prompt_tokens":1}}`},
		{OpenAI, `{"choices":[{"index":0.0}],"usage":{"prompt_tokens":1}}`},
		{OpenAI, `{"choices":[7],"usage":{"prompt_tokens":1}}`},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":"tab	inside"`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":"\x"`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":"\u12"`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":[1,]`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":{"a":1,}`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":tru`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":-`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":1.`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":1e`)},
		{OpenAI, oa(`"usage":{"prompt_tokens":1},"x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600))},
		{OpenAI, "\ufeff" + oa(`"usage":{"prompt_tokens":1}`)},
		{Anthropic, an(`"usage":{"output_tokens":1},"type":"message"`)},
		{Anthropic, `{"type":"mess\u0061ge","usage":{"output_tokens":1}}`},
		{Anthropic, `{"type":"completion","usage":{"output_tokens":1}}`},
		{Anthropic, `{"type":null,"usage":{"output_tokens":1}}`},
		{Anthropic, an(`"usage":{}`)},
		{Anthropic, an(`"usage":{"output_tokens":1},"stop_reason":1`)},
		{Anthropic, `{"type":"message","content":[{"is_error":"yes"}],"usage":{"output_tokens":1}}`},
		{Anthropic, `{"type":"message","content":[{"source":[]}],"usage":{"output_tokens":1}}`},
		{Embeddings, `{"object":"list","data":[],"usage":{"prompt_tokens":1}}`},
		{Embeddings, `{"object":"lists","data":[1],"usage":{"prompt_tokens":1}}`},
		{Embeddings, `{"object":"list","data":[1]}`},
		{Responses, `{"object":"response","usage":{"input_tokens":1}}`},
	} {
		if scanAgrees(t, c.p, []byte(c.body)) {
			t.Errorf("%s: the scan vouched for %s", c.p, c.body)
		}
	}
}

// Cut short anywhere, or with any byte changed to one that matters to
// JSON, an answer is scanned only if DecodeResponse reads it the same.
func TestScanNeverVouchesForWhatDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    Protocol
		body string
	}{{OpenAI, scanOpenAI}, {Anthropic, scanAnthropic}, {Embeddings, scanEmbeddings}} {
		b := []byte(c.body)
		for n := range len(b) {
			scanAgrees(t, c.p, b[:n])
		}
		for i := range len(b) {
			for _, x := range []byte(`"{}[],:0-.en \\A` + "\x01\xff") {
				m := append([]byte(nil), b...)
				m[i] = x
				scanAgrees(t, c.p, m)
			}
		}
	}
}

func FuzzScanResponse(f *testing.F) {
	for _, s := range []string{scanOpenAI, scanAnthropic, scanEmbeddings, `{"choices":[{}],"usage":{"prompt_tokens":1}}`} {
		f.Add(byte(0), []byte(s))
		f.Add(byte(1), []byte(s))
		f.Add(byte(2), []byte(s))
	}
	f.Fuzz(func(t *testing.T, p byte, body []byte) {
		scanAgrees(t, []Protocol{OpenAI, Anthropic, Embeddings}[int(p)%3], body)
	})
}

// The old path (decode into the wire types) and the scan, on the same
// answers.
func BenchmarkWholeAnswer(b *testing.B) {
	for _, c := range []struct {
		name string
		p    Protocol
		body string
	}{{"openai", OpenAI, scanOpenAI}, {"anthropic", Anthropic, scanAnthropic}, {"embeddings", Embeddings, scanEmbeddings}} {
		body := []byte(c.body)
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeResponse(c.p, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/scan", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := ScanResponse(c.p, body); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
