package provider

import (
	"encoding/json"
	"errors"
	"github.com/oncegate/oncegate/internal/docsync"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/sse"
)

// baseBody is a minimal valid request of protocol p with one tool, so that
// tool-related fields have something to act on.
func baseBody(p Protocol) map[string]json.RawMessage {
	if p == Anthropic {
		return map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "max_tokens": json.RawMessage("100"),
			"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
			"tools":    json.RawMessage(`[{"name":"f","input_schema":{"type":"object"}}]`)}
	}
	return map[string]json.RawMessage{"model": json.RawMessage(`"m"`),
		"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
		"tools":    json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)}
}

func other(p Protocol) Protocol {
	if p == OpenAI {
		return Anthropic
	}
	return OpenAI
}

// lookup follows a dotted path through a JSON body.
func lookup(body []byte, path string) (json.RawMessage, bool) {
	raw := json.RawMessage(body)
	for _, key := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil, false
		}
		v, ok := m[key]
		if !ok {
			return nil, false
		}
		raw = v
	}
	return raw, string(raw) != "null"
}

// TestEveryFieldMeetsItsFate walks the field table: every value that asks
// for something gets its fate — translated into the other protocol's
// field, native only, or rejected — and every plain value is translated.
func TestEveryFieldMeetsItsFate(t *testing.T) {
	send := func(t *testing.T, f *Field, value string) (*ClientRequest, error) {
		body := baseBody(f.Protocol)
		body[f.Name] = json.RawMessage(value)
		b, _ := json.Marshal(body)
		return ParseRequest(f.Protocol, b)
	}
	for i := range Fields {
		f := &Fields[i]
		t.Run(string(f.Protocol)+"/"+f.Name, func(t *testing.T) {
			if f.Sample == "" {
				if f.Fate == FateNativeOnly || f.Fate == FateRejected {
					t.Fatal("a field that can be refused needs a sample")
				}
				return // the base request exercises it
			}
			cr, err := send(t, f, f.Sample)
			switch f.Fate {
			case FateRejected:
				var ie *InvalidRequestError
				if !errors.As(err, &ie) || ie.Param != f.Name {
					t.Fatalf("%s: %s must be refused naming the field, got %v", f.Name, f.Sample, err)
				}
			case FateNativeOnly:
				if err != nil || !slices.Contains(cr.NativeOnly, f.Name) {
					t.Fatalf("%s: %s must make the other protocol's routes ineligible (%v, %v)", f.Name, f.Sample, err, cr)
				}
			case FateTranslated:
				if err != nil || len(cr.NativeOnly) != 0 {
					t.Fatalf("%s: %v, native only %v", f.Name, err, cr.NativeOnly)
				}
				built, err := BuildRequest(cr, Target{Protocol: other(f.Protocol), Model: "x", MaxOutputTokens: 1000}, nil)
				if err != nil {
					t.Fatal(err)
				}
				path := strings.TrimSpace(strings.Split(f.To, ",")[0])
				if _, ok := lookup(built.Body, path); !ok {
					t.Fatalf("%s: %s was not carried to %s:\n%s", f.Name, f.Sample, path, built.Body)
				}
			default:
				t.Fatalf("fate %s has no sample to test", f.Fate)
			}
			if f.Plain != "" {
				if cr, err := send(t, f, f.Plain); err != nil || len(cr.NativeOnly) != 0 {
					t.Fatalf("%s: the plain value %s must pass everywhere: %v %v", f.Name, f.Plain, err, cr)
				}
			}
			if _, required := baseBody(f.Protocol)[f.Name]; required {
				return // null is not a value for it
			}
			if cr, err := send(t, f, "null"); f.Fate != FateRejected && (err != nil || len(cr.NativeOnly) != 0) {
				t.Fatalf("%s: null asks for nothing: %v %v", f.Name, err, cr)
			}
		})
	}
	t.Run("an unknown field is native only", func(t *testing.T) {
		for _, p := range []Protocol{OpenAI, Anthropic} {
			body := baseBody(p)
			body["x_vendor_option"] = json.RawMessage("1")
			b, _ := json.Marshal(body)
			cr, err := ParseRequest(p, b)
			if err != nil || !slices.Equal(cr.NativeOnly, []string{"x_vendor_option"}) {
				t.Fatalf("%s: %v %v", p, err, cr)
			}
		}
	})
}

func TestParallelToolCallsBothWays(t *testing.T) {
	body := baseBody(OpenAI)
	body["parallel_tool_calls"] = json.RawMessage("false")
	body["tool_choice"] = json.RawMessage(`"required"`)
	b, _ := json.Marshal(body)
	cr, err := ParseRequest(OpenAI, b)
	if err != nil {
		t.Fatal(err)
	}
	an, err := BuildRequest(cr, Target{Protocol: Anthropic, Model: "x", MaxOutputTokens: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc, _ := lookup(an.Body, "tool_choice"); string(tc) != `{"type":"any","disable_parallel_tool_use":true}` {
		t.Fatalf("to Anthropic: %s", an.Body)
	}
	back, err := ParseRequest(Anthropic, an.Body)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := BuildRequest(back, Target{Protocol: OpenAI, Model: "y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := lookup(oa.Body, "parallel_tool_calls"); string(p) != "false" {
		t.Fatalf("back to OpenAI: %s", oa.Body)
	}
	if tc, _ := lookup(oa.Body, "tool_choice"); string(tc) != `"required"` {
		t.Fatalf("back to OpenAI: %s", oa.Body)
	}
}

// fieldRows renders the field table as docs/translation.md shows it.
func fieldRows() string {
	var b strings.Builder
	b.WriteString("| client | field | fate | to | note |\n|---|---|---|---|---|\n")
	for _, f := range Fields {
		to := "—"
		if f.To != "" {
			to = "`" + strings.ReplaceAll(f.To, ", ", "`, `") + "`"
		}
		note := f.Note
		if f.Plain != "" && f.Fate != FateTranslated {
			note = strings.TrimSpace(note + " (`" + f.Plain + "` is translated)")
		}
		fate := string(f.Fate)
		if f.Droppable {
			fate += ", droppable"
		}
		b.WriteString("| " + string(f.Protocol) + " | `" + f.Name + "` | " + fate + " | " + to + " | " + note + " |\n")
	}
	return b.String()
}

// TestTheDocsShowTheFieldTable holds docs/translation.md to the code's
// table; go test ./internal/provider -update rewrites it.
func TestTheDocsShowTheFieldTable(t *testing.T) {
	docsync.Hold(t, "../../docs/translation.md", "<!-- fields:begin -->", "<!-- fields:end -->", fieldRows(), *update, "go test ./internal/provider -update")
}

// A refusal (OpenAI's delta.refusal, message.refusal) is the answer: it is
// relayed as a refusal to OpenAI clients and as text, with stop_reason
// refusal, to Anthropic clients — never dropped.
func TestRefusalsAreRelayed(t *testing.T) {
	const chunk = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`
	frames := []string{
		strings.Replace(strings.Replace(chunk, "%s", `{"role":"assistant","content":null,"refusal":""}`, 1), "%s", "null", 1),
		strings.Replace(strings.Replace(chunk, "%s", `{"refusal":"I can't"}`, 1), "%s", "null", 1),
		strings.Replace(strings.Replace(chunk, "%s", `{"refusal":" help with that."}`, 1), "%s", "null", 1),
		strings.Replace(strings.Replace(chunk, "%s", `{}`, 1), "%s", `"stop"`, 1),
	}
	dec := NewDecoder(OpenAI)
	var refusal strings.Builder
	for _, f := range frames {
		evs, err := dec.Decode(sse.Event{Data: []byte(f)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == EvText {
				t.Fatalf("a refusal decoded as text: %+v", e)
			}
			if e.Kind == EvRefusal {
				if !e.Visible() {
					t.Fatal("a refusal is visible output")
				}
				refusal.WriteString(e.Text)
			}
		}
	}
	if refusal.String() != "I can't help with that." {
		t.Fatalf("refusal %q", refusal.String())
	}
	enc := NewEncoder(OpenAI, "chatcmpl-x", 1, "m").(RefusalEncoder)
	out := enc.Refusal(nil, "No.")
	if !strings.Contains(string(out), `"delta":{"refusal":"No."}`) {
		t.Fatalf("encoded %s", out)
	}

	body := []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":6,"total_tokens":15}}`)
	r, err := DecodeResponse(OpenAI, body)
	if err != nil {
		t.Fatal(err)
	}
	an := string(EncodeResponse(Anthropic, r, "msg_x"))
	if !strings.Contains(an, `"text":"I can't help with that."`) || !strings.Contains(an, `"stop_reason":"refusal"`) {
		t.Fatalf("to Anthropic: %s", an)
	}
	oa := string(EncodeResponse(OpenAI, r, "chatcmpl-x"))
	if !strings.Contains(oa, `"refusal":"I can't help with that."`) || !strings.Contains(oa, `"content":null`) {
		t.Fatalf("to OpenAI: %s", oa)
	}
}
