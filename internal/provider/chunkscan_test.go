package provider

import (
	"reflect"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// The chunk shapes OpenAI's API sends, with their members in its order
// (service_tier and obfuscation included); the mock's, with its sorted
// keys, are in testdata/fuzz/FuzzChunkScan and chunkscan_mock_test.go.
const (
	chunkHead = `{"id":"chatcmpl-A3Tguz3LSXTHBTY2NAPBCSyfBltxF","object":"chat.completion.chunk","created":1725392480,` +
		`"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_157b3831f5",`
	chunkRole  = chunkHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Qx3"}`
	chunkText  = chunkHead + `"choices":[{"index":0,"delta":{"content":" take"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"kP"}`
	chunkStop  = chunkHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"2fjW"}`
	chunkUsage = chunkHead + `"choices":[],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,` +
		`"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,` +
		`"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"obfuscation":"a"}`
	chunkToolStart = chunkHead + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA",` +
		`"type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkToolArgs = chunkHead + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":\"Par"}}]},` +
		`"logprobs":null,"finish_reason":null}],"usage":null}`
	chunkAzure = `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Hi"},` +
		`"finish_reason":null,"index":0,"logprobs":null}],"created":1725392480,"id":"chatcmpl-az","model":"gpt-4o","object":"chat.completion.chunk","system_fingerprint":"fp_az"}`
	chunkAzurePrompt = `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,` +
		`"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`
)

// The scan reads the shapes a stream is made of, and the events it
// appends are the ones encoding/json's decode appends.
func TestChunkScanReadsTheCommonShapes(t *testing.T) {
	t.Parallel()
	text := func(s string) []Event { return []Event{{Kind: EvText, Text: s}} }
	withText := func(content string) string {
		return `{"id":"c","choices":[{"index":0,"delta":{"content":` + content + `},"finish_reason":null}]}`
	}
	for _, c := range []struct {
		name    string
		started bool
		data    string
		want    []Event
	}{
		{"role chunk opens the stream", false, chunkRole,
			[]Event{{Kind: EvStart, ID: "chatcmpl-A3Tguz3LSXTHBTY2NAPBCSyfBltxF", Model: "gpt-4o-2024-08-06"}}},
		{"role chunk mid-stream is silent", true, chunkRole, nil},
		{"text delta", true, chunkText, text(" take")},
		{"text delta as the first chunk", false, chunkText,
			[]Event{{Kind: EvStart, ID: "chatcmpl-A3Tguz3LSXTHBTY2NAPBCSyfBltxF", Model: "gpt-4o-2024-08-06"}, {Kind: EvText, Text: " take"}}},
		{"finish reason", true, chunkStop, []Event{{Kind: EvFinish, Finish: "stop"}}},
		{"usage chunk", true, chunkUsage, []Event{{Kind: EvUsage, Usage: gw.Usage{InputTokens: 1117, OutputTokens: 46, CachedTokens: 1024}}}},
		{"empty usage object", true, `{"choices":[],"usage":{}}`, []Event{{Kind: EvUsage}}},
		{"null usage counts", true, `{"usage":{"prompt_tokens":null,"prompt_tokens_details":null}}`, []Event{{Kind: EvUsage}}},
		{"tool call start", true, chunkToolStart,
			[]Event{{Kind: EvToolStart, ToolID: "call_DdmO9pD3xa9XTPNJ32zg2hcA", ToolName: "get_weather"}}},
		{"tool call arguments", true, chunkToolArgs, []Event{{Kind: EvToolArgs, Args: `{"location":"Par`}}},
		{"two tool calls, the second by index", true,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"b","function":{"name":"g"}}]}}]}`,
			[]Event{{Kind: EvToolStart, ToolID: "a", ToolName: "f"}, {Kind: EvToolArgs, Args: "{}"}, {Kind: EvToolStart, ToolIndex: 1, ToolID: "b", ToolName: "g"}}},
		{"negative tool index", true,
			`{"id":"test","object":"chat.completion.chunk","created":0,"model":"test","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_123","index":-1,"type":"function","function":{"name":"test_func","arguments":"{}"}}]}}]}`,
			[]Event{{Kind: EvToolStart, ToolIndex: -1, ToolID: "call_123", ToolName: "test_func"}, {Kind: EvToolArgs, ToolIndex: -1, Args: "{}"}}},
		{"text, tool call and finish in one chunk, in decodeChunk's order", true,
			`{"choices":[{"finish_reason":"tool_calls","delta":{"tool_calls":[{"function":{"arguments":"1"}}],"content":"x"}}],"usage":{"completion_tokens":2}}`,
			[]Event{{Kind: EvText, Text: "x"}, {Kind: EvToolArgs, Args: "1"}, {Kind: EvFinish, Finish: "tool_calls"}, {Kind: EvUsage, Usage: gw.Usage{OutputTokens: 2}}}},
		{"Azure content filter results", true, chunkAzure, text("Hi")},
		{"Azure prompt filter chunk opens the stream", false, chunkAzurePrompt, []Event{{Kind: EvStart}}},
		{"spaces between tokens", true, " {\n \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"a b\" } } ] }\r\n\t", text("a b")},
		{"empty content is no event", true, withText(`""`), nil},
		{"null content is no event", true, withText(`null`), nil},
		{"null delta and choices", true, `{"choices":[{"delta":null}]}`, nil},
		{"escaped newline and quote", true, withText(`"line\nnext \"quoted\" back\\slash"`), text("line\nnext \"quoted\" back\\slash")},
		{"every short escape", true, withText(`"\b\f\n\r\t\/\\\""`), text("\b\f\n\r\t/\\\"")},
		{"unicode escape", true, withText(`"caf\u00e9 \u00E9"`), text("café é")},
		{"escaped NUL", true, withText(`"a\u0000b"`), text("a\x00b")},
		{"surrogate pair", true, withText(`"\ud83d\ude00 ok"`), text("😀 ok")},
		{"raw UTF-8", true, withText(`"é 😀 ✓"`), text("é 😀 ✓")},
		{"raw UTF-8 and escapes", true, withText(`"é\n\u2014✓\ud83d\ude00"`), text("é\n—✓😀")},
		{"escaped U+FFFD is kept", true, withText(`"\ufffd"`), text("\ufffd")},
		{"less-than, ampersand as Go escapes them", true, withText(`"\u003cb\u003e \u0026"`), text("<b> &")},
		{"escapes in id and model", false, `{"id":"c\u0031","model":"gpt\/4","choices":[]}`, []Event{{Kind: EvStart, ID: "c1", Model: "gpt/4"}}},
		{"minus zero index", true, `{"choices":[{"index":-0,"delta":{"content":"z"}}]}`, text("z")},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := scanChunk([]byte(c.data), c.started, nil)
			if !ok {
				t.Fatalf("declined %s", c.data)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("scanned %+v, want %+v", got, c.want)
			}
			full, err := (&openAIDecoder{started: c.started}).decodeFull([]byte(c.data), nil)
			if err != nil || !reflect.DeepEqual(full, c.want) {
				t.Fatalf("encoding/json reads %+v (%v), want %+v", full, err, c.want)
			}
		})
	}
}

// What the scan declines; Decode reads each with encoding/json.
var chunkDeclined = []struct{ name, data string }{
	{"error chunk", `{"error":{"message":"Overloaded","type":"server_error","param":null,"code":null}}`},
	{"error null", `{"choices":[],"error":null}`},
	{"refusal", `{"choices":[{"index":0,"delta":{"refusal":"I can't"},"finish_reason":null}]}`},
	{"logprobs", `{"choices":[{"index":0,"delta":{"content":"Let's"},"logprobs":{"content":[{"token":"Let's","logprob":-2.34,"bytes":[76],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`},
	{"two choices", `{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`},
	{"choice of index 1", `{"choices":[{"index":1,"delta":{"content":"b"}}]}`},
	{"null choice", `{"choices":[null]}`},
	{"fractional index", `{"choices":[{"index":0.0,"delta":{"content":"b"}}]}`},
	{"unknown delta member", `{"choices":[{"delta":{"content":"","reasoning_content":"hmm"}}]}`},
	{"unknown top member", `{"choices":[],"x_groq":{"id":"req"}}`},
	{"key in another case", `{"choices":[{"delta":{"Content":"x"}}]}`},
	{"escaped key", `{"choices":[{"delta":{"c\u006fntent":"x"}}]}`},
	{"repeated member", `{"choices":[{"delta":{"content":"x","content":"y"}}]}`},
	{"repeated choices", `{"choices":[],"choices":[{"delta":{"content":"y"}}]}`},
	{"lone high surrogate", `{"choices":[{"delta":{"content":"\ud83d"}}]}`},
	{"high surrogate then a letter", `{"choices":[{"delta":{"content":"\ud83d\u0041"}}]}`},
	{"lone low surrogate", `{"choices":[{"delta":{"content":"\ude00x"}}]}`},
	{"invalid UTF-8", "{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}"},
	{"UTF-8 of a surrogate", "{\"choices\":[{\"delta\":{\"content\":\"\xed\xa0\x80\"}}]}"},
	{"content of another type", `{"choices":[{"delta":{"content":5}}]}`},
	{"string usage count", `{"usage":{"prompt_tokens":"5"}}`},
	{"usage count too long to vouch for", `{"usage":{"prompt_tokens":1234567890123456789}}`},
	{"fractional usage count", `{"usage":{"prompt_tokens":1.5}}`},
	{"five tool calls", `{"choices":[{"delta":{"tool_calls":[{},{},{},{},{}]}}]}`},
	{"tool index too long", `{"choices":[{"delta":{"tool_calls":[{"index":12345678901}]}}]}`},
	{"control byte in a string", "{\"choices\":[{\"delta\":{\"content\":\"a\nb\"}}]}"},
	{"bad escape", `{"choices":[{"delta":{"content":"\x41"}}]}`},
	{"cut short", `{"id":"chatcmpl-up1","choices":[{"delta":{"content":"broken`},
	{"trailing bytes", `{"choices":[]}x`},
	{"two objects", `{"choices":[]}{"choices":[]}`},
	{"trailing comma", `{"choices":[],}`},
	{"not an object", `["choices"]`},
	{"null", `null`},
	{"empty", ``},
	{"deep nesting in a skipped member", `{"object":` + deep(600) + `}`},
}

// deep is n nested arrays.
func deep(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

func TestChunkScanDeclines(t *testing.T) {
	t.Parallel()
	for _, c := range chunkDeclined {
		t.Run(c.name, func(t *testing.T) {
			for _, started := range []bool{false, true} {
				if evs, ok := scanChunk([]byte(c.data), started, nil); ok || len(evs) != 0 {
					t.Fatalf("started %v: scanned %+v", started, evs)
				}
				decodeAgrees(t, []byte(c.data), started)
			}
		})
	}
}

// decodeAgrees checks one chunk: when the scan vouches for it, its events
// are encoding/json's, and Decode, by whichever path, appends what
// encoding/json's decode appends, leaving the decoder in its state.
func decodeAgrees(t *testing.T, data []byte, started bool) {
	t.Helper()
	full := &openAIDecoder{started: started}
	prefix := []Event{{Kind: EvDone}} // what out held before
	want, wantErr := full.decodeFull(data, prefix)
	if got, ok := scanChunk(data, started, prefix); ok {
		if wantErr != nil {
			t.Fatalf("started %v: scanned %+v, encoding/json refuses it (%v): %q", started, got, wantErr, data)
		}
		if !reflect.DeepEqual(got, want) || !full.started {
			t.Fatalf("started %v: scanned %+v, encoding/json reads %+v: %q", started, got, want, data)
		}
	} else if !reflect.DeepEqual(got, prefix) {
		t.Fatalf("started %v: declined, out %+v: %q", started, got, data)
	}
	dec := &openAIDecoder{started: started}
	got, err := dec.Decode(sse.Event{Data: data}, prefix)
	if !reflect.DeepEqual(got, want) || errText(err) != errText(wantErr) || dec.started != full.started {
		t.Fatalf("started %v: Decode %+v %v (started %v), encoding/json %+v %v (started %v): %q",
			started, got, err, dec.started, want, wantErr, full.started, data)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzChunkScan: for any bytes, Decode appends exactly what encoding/json's
// decode appends, and returns its error; where the scan vouches for a
// chunk, the two read it the same.
func FuzzChunkScan(f *testing.F) {
	for _, s := range []string{chunkRole, chunkText, chunkStop, chunkUsage, chunkToolStart, chunkToolArgs, chunkAzure, chunkAzurePrompt,
		`{"choices":[{"delta":{"content":"caf\u00e9 \ud83d\ude00 \"q\"\n"}}]}`} {
		f.Add([]byte(s))
	}
	for _, c := range chunkDeclined {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if string(data) == "[DONE]" {
			return // the end of the stream, before any chunk is read
		}
		decodeAgrees(t, data, false)
		decodeAgrees(t, data, true)
	})
}
