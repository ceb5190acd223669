package bedrock

import (
	"encoding/json"
	"errors"
	"github.com/oncegate/oncegate/internal/docsync"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/provider"
)

// baseBody is a minimal valid request of protocol p with one tool.
func baseBody(p provider.Protocol) map[string]json.RawMessage {
	if p == provider.Anthropic {
		return map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "max_tokens": json.RawMessage("100"),
			"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
			"tools":    json.RawMessage(`[{"name":"f","input_schema":{"type":"object"}}]`)}
	}
	return map[string]json.RawMessage{"model": json.RawMessage(`"m"`),
		"messages": json.RawMessage(`[{"role":"user","content":"hi"}]`),
		"tools":    json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)}
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

// TestEveryFieldMeetsItsBedrockFate walks the bedrock column: a value that
// asks for something is carried to its Converse member, makes bedrock
// routes ineligible, or is refused; a plain value is carried.
func TestEveryFieldMeetsItsBedrockFate(t *testing.T) {
	if len(Fields) != len(provider.Fields) {
		t.Fatalf("the bedrock column has %d rows, the table %d", len(Fields), len(provider.Fields))
	}
	send := func(f *Field, value string) (*provider.ClientRequest, []byte, error) {
		body := baseBody(f.Protocol)
		body[f.Name] = json.RawMessage(value)
		b, _ := json.Marshal(body)
		cr, err := provider.ParseRequest(f.Protocol, b)
		return cr, b, err
	}
	for i := range Fields {
		f := &Fields[i]
		t.Run(string(f.Protocol)+"/"+f.Name, func(t *testing.T) {
			if f.Sample == "" {
				return // the base request exercises it
			}
			cr, body, err := send(f, f.Sample)
			switch f.Fate {
			case provider.FateRejected:
				var ie *provider.InvalidRequestError
				if !errors.As(err, &ie) || ie.Param != f.Name {
					t.Fatalf("%s must be refused naming the field, got %v", f.Sample, err)
				}
			case provider.FateNativeOnly:
				if err != nil || !slices.Contains(NativeOnly(f.Protocol, body), f.Name) {
					t.Fatalf("%s must make bedrock routes ineligible (%v)", f.Sample, err)
				}
			case provider.FateTranslated:
				if err != nil || len(NativeOnly(f.Protocol, body)) != 0 {
					t.Fatalf("%v, native only %v", err, NativeOnly(f.Protocol, body))
				}
				built, err := BuildRequest(cr, provider.Target{Model: "x", MaxOutputTokens: 1000}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := lookup(built.Body, f.To); !ok {
					t.Fatalf("%s was not carried to %s:\n%s", f.Sample, f.To, built.Body)
				}
			}
			if f.Plain != "" {
				_, body, err := send(f, f.Plain)
				if err != nil || len(NativeOnly(f.Protocol, body)) != 0 {
					t.Fatalf("the plain value %s must pass: %v %v", f.Plain, err, NativeOnly(f.Protocol, body))
				}
			}
		})
	}
	body := baseBody(provider.Anthropic)
	body["tool_choice"] = json.RawMessage(`{"type":"any","disable_parallel_tool_use":true}`)
	b, _ := json.Marshal(body)
	if got := NativeOnly(provider.Anthropic, b); !slices.Equal(got, []string{"tool_choice"}) {
		t.Errorf("disable_parallel_tool_use: native only %v", got)
	}
}

// TestEveryIRFieldIsHandled: each field of the neutral request is either
// translated or refused by name on a bedrock route. A field added to the
// IR fails here until Build handles it.
func TestEveryIRFieldIsHandled(t *testing.T) {
	handled := map[string]string{
		"Model": "path", "System": "system", "Messages": "messages", "Tools": "toolConfig.tools",
		"ToolChoice": "toolConfig.toolChoice", "MaxTokens": "inferenceConfig.maxTokens",
		"Temperature": "inferenceConfig.temperature", "TopP": "inferenceConfig.topP",
		"Stop": "inferenceConfig.stopSequences", "Stream": "path", "IncludeUsage": "metadata event",
		"JSONSchema": "refused: response_format", "User": "requestMetadata.user",
		"Thinking": "refused: thinking", "ParallelToolCalls": "refused when false: parallel_tool_calls",
		"Choices": "native only: n (a bedrock route is skipped, or drops it)",
	}
	rt := reflect.TypeFor[provider.Request]()
	for i := range rt.NumField() {
		if _, ok := handled[rt.Field(i).Name]; !ok {
			t.Errorf("provider.Request.%s is neither translated nor refused by bedrock.Build", rt.Field(i).Name)
		}
	}
	temp, no := 1.5, false
	for param, ir := range map[string]*provider.Request{
		"response_format":     {JSONSchema: true},
		"thinking":            {Thinking: true},
		"temperature":         {Temperature: &temp},
		"parallel_tool_calls": {ParallelToolCalls: &no, Tools: []provider.Tool{{Name: "f"}}},
		"user":                {User: strings.Repeat("u", 300)},
		"messages[0].content[0]": {Messages: []provider.Message{{Role: "user",
			Parts: []provider.Part{{Type: provider.PartImage, ImageURL: "https://example.com/cat.png"}}}}},
		"messages[0].role": {Messages: []provider.Message{{Role: "developer", Parts: []provider.Part{{Type: "text", Text: "x"}}}}},
		"tool_choice": {Tools: []provider.Tool{{Name: "f"}}, ToolChoice: &provider.ToolChoice{Mode: provider.ToolNone},
			Messages: []provider.Message{{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "1", Name: "f"}}}}},
	} {
		_, err := Build(ir, 0)
		var ie *provider.InvalidRequestError
		if !errors.As(err, &ie) || ie.Param != param {
			t.Errorf("%s: %v", param, err)
		}
	}
}

// TestBuildShapes covers what the SDK comparison does not: tool_choice
// none and named, an Anthropic client's blocks, a continuation.
func TestBuildShapes(t *testing.T) {
	ir := &provider.Request{Tools: []provider.Tool{{Name: "f"}}, ToolChoice: &provider.ToolChoice{Mode: provider.ToolNone},
		Messages: []provider.Message{{Role: "user", Parts: []provider.Part{{Type: "text", Text: "hi"}}}}}
	b, err := Build(ir, 10)
	if err != nil || strings.Contains(string(b), "toolConfig") {
		t.Errorf("tool_choice none: %s %v", b, err)
	}
	ir.ToolChoice = &provider.ToolChoice{Mode: provider.ToolNamed, Name: "f"}
	b, _ = Build(ir, 10)
	if tc, _ := lookup(b, "toolConfig.toolChoice"); string(tc) != `{"tool":{"name":"f"}}` {
		t.Errorf("named: %s", b)
	}
	if s, _ := lookup(b, "toolConfig.tools"); !strings.Contains(string(s), `"json":{"type":"object","properties":{}}`) {
		t.Errorf("a tool without parameters: %s", s)
	}

	an := `{"model":"m","max_tokens":50,"system":"Be brief.","messages":[
	 {"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},{"type":"text","text":"what?"}]},
	 {"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"f","input":{"a":1}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","is_error":true,"content":"boom"}]}],
	 "tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"}}`
	cr, err := provider.ParseRequest(provider.Anthropic, []byte(an))
	if err != nil {
		t.Fatal(err)
	}
	built, err := BuildRequest(cr, provider.Target{Model: "m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"user","content":[{"image":{"format":"jpeg","source":{"bytes":"/9j/4AAQ"}}},{"text":"what?"}]},` +
		`{"role":"assistant","content":[{"toolUse":{"toolUseId":"tu_1","name":"f","input":{"a":1}}}]},` +
		`{"role":"user","content":[{"toolResult":{"toolUseId":"tu_1","content":[{"text":"boom"}],"status":"error"}}]}],` +
		`"system":[{"text":"Be brief."}],"inferenceConfig":{"maxTokens":50},` +
		`"toolConfig":{"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{"type":"object"}}}}],"toolChoice":{"auto":{}}}}`
	if string(built.Body) != want {
		t.Errorf("anthropic client\n got %s\nwant %s", built.Body, want)
	}

	prefix := "Once upon"
	if _, err := BuildRequest(cr, provider.Target{Model: "m", Continuation: "none"}, &prefix); err == nil {
		t.Error("a route without continuation was asked to continue")
	}
	plain, _ := provider.ParseRequest(provider.OpenAI, []byte(`{"model":"m","messages":[{"role":"user","content":"tell a story"}]}`))
	built, err = BuildRequest(plain, provider.Target{Model: "m", Continuation: provider.ContinuePrefill, MaxTokens: 7}, &prefix)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"messages":[{"role":"user","content":[{"text":"tell a story"}]},{"role":"assistant","content":[{"text":"Once upon"}]}],"inferenceConfig":{"maxTokens":7}}`
	if string(built.Body) != want {
		t.Errorf("continuation\n got %s\nwant %s", built.Body, want)
	}
}

// fieldRows renders the bedrock column as docs/providers.md shows it.
func fieldRows() string {
	var b strings.Builder
	b.WriteString("| client | field | fate on bedrock | to | note |\n|---|---|---|---|---|\n")
	for _, f := range Fields {
		to := "—"
		if f.To != "" {
			to = "`" + f.To + "`"
		}
		note := f.Note
		if f.Plain != "" && f.Fate != provider.FateTranslated {
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

// TestTheDocsShowTheBedrockColumn holds docs/providers.md to the
// code's table; go test ./internal/provider/bedrock -update rewrites it.
func TestTheDocsShowTheBedrockColumn(t *testing.T) {
	docsync.Hold(t, "../../../docs/providers.md", "<!-- bedrock-fields:begin -->", "<!-- bedrock-fields:end -->", fieldRows(), *update, "go test ./internal/provider/bedrock -update")
}

func TestUncarried(t *testing.T) {
	l := Converse.(provider.FieldLimiter)
	for _, c := range []struct {
		p    provider.Protocol
		body string
		want []string
	}{
		{provider.OpenAI, `{"model":"m","messages":[],"parallel_tool_calls":false,"seed":1}`, []string{"parallel_tool_calls"}},
		{provider.OpenAI, `{"model":"m","messages":[],"parallel_tool_calls":true}`, nil},
		{provider.Anthropic, `{"model":"m","messages":[],"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`, []string{"tool_choice"}},
		{provider.Anthropic, `{"model":"m","messages":[],"top_k":5}`, nil}, // native only everywhere: not this type's
		{provider.OpenAI, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]}`, []string{"messages (an image by URL)"}},
		{provider.OpenAI, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`, nil},
		{provider.Anthropic, `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/cat.png"}}]}]}`, []string{"messages (an image by URL)"}},
		{provider.Anthropic, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil},
		// tool_choice none is carried (the tools are left out) — unless the
		// conversation already used tools, which Converse accepts only
		// with its toolConfig: then it names the field, not a route's 400.
		{provider.OpenAI, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` + weather + `],"tool_choice":"none"}`, nil},
		{provider.OpenAI, `{"model":"m","tools":[` + weather + `],"tool_choice":"none","messages":[{"role":"user","content":"Weather in Paris?"},` +
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"18C"}]}`,
			[]string{"tool_choice (bedrock routes cannot forbid tools in a conversation that used them)"}},
		{provider.Anthropic, `{"model":"m","max_tokens":9,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"none"},"messages":[` +
			`{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"18C"}]}]}`,
			[]string{"tool_choice (bedrock routes cannot forbid tools in a conversation that used them)"}},
	} {
		cr, err := provider.ParseRequest(c.p, []byte(c.body))
		if err != nil {
			cr = &provider.ClientRequest{Protocol: c.p, Body: []byte(c.body)} // the field table alone
		}
		if got := l.Uncarried(cr); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.body, got, c.want)
		}
	}
}

// weather is an OpenAI function tool.
const weather = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`
