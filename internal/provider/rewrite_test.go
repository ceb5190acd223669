package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// randomJSON writes a random JSON value, nested at most depth deep.
func randomJSON(r *rand.Rand, depth int) string {
	switch k := r.IntN(9); {
	case k == 0:
		return "null"
	case k == 1:
		return []string{"true", "false"}[r.IntN(2)]
	case k == 2:
		return []string{"0", "-1", "3.25", "1e3", "42"}[r.IntN(5)]
	case k < 6 || depth == 0:
		return []string{`"x"`, `""`, `"a\"b}{,]"`, `"<tag> & \u2028"`, `"é✓"`, `"\\"`}[r.IntN(6)]
	case k < 8:
		parts := make([]string, r.IntN(4))
		for i := range parts {
			parts[i] = randomJSON(r, depth-1)
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		parts := make([]string, r.IntN(4))
		for i := range parts {
			parts[i] = fmt.Sprintf(`"k%d" : %s`, i, randomJSON(r, depth-1))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
}

// randomClientBody writes a random client body of protocol p that
// ParseRequest may accept: the members the rewrite edits, present or not,
// in any order and spacing, among members it does not know, sometimes
// with a key spelled with an escape or twice.
func randomClientBody(r *rand.Rand, p Protocol) string {
	members := []string{`"model":"chat"`, `"messages":[{"role":"user","content":"hi <b> & \"q\""}]`}
	maybe := func(m ...string) {
		if r.IntN(2) == 0 {
			members = append(members, m[r.IntN(len(m))])
		}
	}
	maybe(`"stream":true`, `"stream":false`, `"stream":null`)
	if p == OpenAI {
		maybe(`"max_tokens":700`, `"max_tokens":5000`, `"max_tokens":null`)
		maybe(`"stream_options":{"include_usage":false}`, `"stream_options":null`, `"stream_options":{}`,
			`"stream_options":{ "x" : [1,{"include_usage":false}], "include_usage" : true }`, `"stream_options":{"a":1,"a":2}`)
		maybe(`"max_completion_tokens":700`, `"max_completion_tokens":5000`)
		maybe(`"Model":"other"`, `"STREAM":true`)
	} else {
		members[1] = `"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]`
		members = append(members, `"max_tokens":`+[]string{"700", "5000", "1"}[r.IntN(3)])
		maybe(`"system":"be brief"`, `"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]`)
	}
	for range r.IntN(4) {
		members = append(members, fmt.Sprintf(`"extra_%d":%s`, r.IntN(1000), randomJSON(r, 3)))
	}
	if r.IntN(6) == 0 { // a body the rewrite leaves to the rebuild
		members = append(members, []string{`"\u006dodel":"escaped"`, `"temperature":0.5,"temperature":0.7`, `"model":"twice"`}[r.IntN(3)])
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	sep := []string{",", " , ", ",\n  "}[r.IntN(3)]
	return []string{"", " ", "\n"}[r.IntN(3)] + "{" + strings.Join(members, sep) + "}" + []string{"", "\n"}[r.IntN(2)]
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	if d.More() {
		t.Fatalf("trailing data: %s", b)
	}
	return v
}

// The in-place rewrite of a same-protocol request writes the document the
// decode-and-re-encode path writes, for every target, on random client
// bodies; and it takes most of them.
func TestRewriteIsTheRebuild(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 3))
	inPlace, rebuilt := 0, 0
	for i := range 4000 {
		p := []Protocol{OpenAI, Anthropic}[i%2]
		body := []byte(randomClientBody(r, p))
		in, err := ParseRequest(p, body)
		if err != nil {
			continue // what the gateway refuses never reaches a route
		}
		tg := Target{Protocol: p, Model: []string{"up", "gpt-4o<&>", "é"}[r.IntN(3)], Stream: r.IntN(2) == 0,
			MaxTokens: []int64{0, 700, in.IR.MaxTokens}[r.IntN(3)], MaxOutputTokens: 4096}
		var got, want []byte
		var ok bool
		if p == OpenAI {
			got, ok = rewriteOpenAI(body, tg, in.IR.Stream, in.IR.MaxTokens)
			want, err = rebuildOpenAI(body, tg, in.IR, false, in.IR.MaxTokens)
		} else {
			got, ok = rewriteAnthropic(body, tg)
			want, err = rebuildAnthropic(body, tg, in.IR, false)
		}
		if err != nil {
			t.Fatalf("rebuild %s: %v", body, err)
		}
		if !ok {
			rebuilt++
			continue
		}
		inPlace++
		if g, w := decodeAny(t, got), decodeAny(t, want); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s on %+v:\n in place %s\n rebuilt  %s", body, tg, got, want)
		}
		built, err := BuildRequest(in, tg, nil)
		if err != nil || !bytes.Equal(built.Body, got) {
			t.Fatalf("BuildRequest wrote %s (%v), not the rewrite %s", built.Body, err, got)
		}
	}
	if inPlace < 3*rebuilt {
		t.Fatalf("%d bodies rewritten in place, %d rebuilt: the rewrite takes too few", inPlace, rebuilt)
	}
}

// What the rewrite does not edit keeps its bytes, spacing included.
func TestRewriteKeepsTheClientsBytes(t *testing.T) {
	body := []byte(" {\n  \"model\" : \"chat\",\n  \"messages\": [{\"role\":\"user\", \"content\":\"<b>\\u00e9</b>\"}],\n  \"stream\": true,\n  \"x_vendor\": {\"a\" : 1}\n}\n")
	got, ok := rewriteOpenAI(body, Target{Protocol: OpenAI, Model: "up", Stream: true, MaxTokens: 700}, true, 0)
	want := " {\n  \"model\" : \"up\",\n  \"messages\": [{\"role\":\"user\", \"content\":\"<b>\\u00e9</b>\"}],\n  \"stream\": true,\n  \"x_vendor\": {\"a\" : 1}," +
		"\"stream_options\":{\"include_usage\":true},\"max_tokens\":700\n}\n"
	if !ok || string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	got, ok = rewriteAnthropic([]byte(`{"stream":true,"model":"m","max_tokens":9}`), Target{Protocol: Anthropic, Model: "up"})
	if !ok || string(got) != `{"model":"up","max_tokens":9}` {
		t.Fatalf("got %s", got)
	}
}

// FuzzRewrite: on any object encoding/json reads, the in-place rewrite,
// when it takes the body, writes the document the rebuild writes.
func FuzzRewrite(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add([]byte(randomClientBody(r, OpenAI)), true, int64(700), int64(0))
	}
	f.Add([]byte(`{"model":"m","stream_options":{"include_usage":false,"b":[]},"max_completion_tokens":3}`), true, int64(5), int64(3))
	f.Fuzz(func(t *testing.T, body []byte, stream bool, limit, clientMax int64) {
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil || top == nil {
			return // callers parse the body first
		}
		if so, ok := top["stream_options"]; ok {
			var opts map[string]json.RawMessage
			if json.Unmarshal(so, &opts) != nil {
				return // ParseRequest refuses stream_options that is not an object
			}
		}
		tg := Target{Protocol: OpenAI, Model: "up", Stream: stream, MaxTokens: limit}
		ir := &Request{Stream: bytes.Contains(body, []byte("stream")), MaxTokens: clientMax}
		if got, ok := rewriteOpenAI(body, tg, ir.Stream, clientMax); ok {
			want, err := rebuildOpenAI(body, tg, ir, false, clientMax)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := decodeAny(t, got), decodeAny(t, want); !reflect.DeepEqual(g, w) {
				t.Fatalf("%s:\n in place %s\n rebuilt  %s", body, got, want)
			}
		}
		if got, ok := rewriteAnthropic(body, tg); ok {
			want, err := rebuildAnthropic(body, tg, ir, false)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := decodeAny(t, got), decodeAny(t, want); !reflect.DeepEqual(g, w) {
				t.Fatalf("%s:\n in place %s\n rebuilt  %s", body, got, want)
			}
		}
	})
}

// built keeps a benchmark's result alive.
var built *Built

// BenchmarkSameProtocolRequest: one attempt's upstream body for a
// same-protocol request, written in place against decoded into a map of
// members and encoded again (or, for the plain request, its model
// replaced as before).
func BenchmarkSameProtocolRequest(b *testing.B) {
	long := strings.Repeat("Summarise the quarterly report, section by section. ", 40)
	oa := []byte(`{"model":"chat","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + long +
		`"}],"temperature":0.2,"stream":true,"max_tokens":900,"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}`)
	plain := []byte(`{"model":"bench","stream":false,"messages":[{"role":"user","content":"Benchmark the relay, request 1234."}]}`)
	an := []byte(`{"model":"chat","system":"You are terse.","messages":[{"role":"user","content":[{"type":"text","text":"` + long +
		`"}]}],"temperature":0.2,"stream":true,"max_tokens":900}`)
	for _, c := range []struct {
		name string
		p    Protocol
		body []byte
		t    Target
	}{
		{"openai/plain", OpenAI, plain, Target{Protocol: OpenAI, Model: "gpt-4o"}}, // the load benchmark's request
		{"openai/stream", OpenAI, oa, Target{Protocol: OpenAI, Model: "gpt-4o", Stream: true}},
		{"openai/capped", OpenAI, oa, Target{Protocol: OpenAI, Model: "gpt-4o", MaxTokens: 500}},
		{"anthropic/stream", Anthropic, an, Target{Protocol: Anthropic, Model: "claude", Stream: true}},
	} {
		in, err := ParseRequest(c.p, c.body)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/in-place", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if built, err = BuildRequest(in, c.t, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/rebuilt", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var body []byte
				var err error
				if c.p == OpenAI {
					body, err = rebuildOpenAI(in.Body, c.t, in.IR, false, in.IR.MaxTokens)
				} else {
					body, err = rebuildAnthropic(in.Body, c.t, in.IR, false)
				}
				if err != nil {
					b.Fatal(err)
				}
				// What BuildRequest returned, counting the prompt again.
				built = &Built{Body: body, PromptTokens: PromptTokens(in.IR)}
			}
		})
	}
}

// stringEnd finds where encoding/json ends a string, on any input.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"x`, `"a\\"b`, `"a\\\"b"`, `"\`, `"`, `"x\\\\"`, `"é\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		want := -1 // the index past the closing quote, as a byte-by-byte scan finds it
		for j := 1; j < len(b); j++ {
			if b[j] == '\\' {
				j++
			} else if b[j] == '"' {
				want = j + 1
				break
			}
		}
		if got := stringEnd(b, 0); got != want {
			t.Fatalf("stringEnd(%q) = %d, want %d", b, got, want)
		}
	})
}
