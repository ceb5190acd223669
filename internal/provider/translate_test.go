package provider

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
)

func mustParse(t *testing.T, p Protocol, body string) *ClientRequest {
	t.Helper()
	cr, err := ParseRequest(p, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}

const openaiFull = `{"model":"chat","temperature":0.2,"seed":7,"logprobs":false,"stop":"END","max_completion_tokens":300,
 "messages":[
  {"role":"system","content":"Be brief."},
  {"role":"developer","content":"Use metric units."},
  {"role":"user","content":[{"type":"text","text":"What is in this picture?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
  {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"id\":7}"}}]},
  {"role":"tool","tool_call_id":"call_1","content":"a red bicycle"},
  {"role":"user","content":"And the weather?"}],
 "tools":[{"type":"function","function":{"name":"lookup","description":"find things","parameters":{"type":"object"}}}],
 "tool_choice":{"type":"function","function":{"name":"lookup"}}}`

func TestOpenAIRequestToAnthropic(t *testing.T) {
	cr := mustParse(t, OpenAI, openaiFull)
	before := append([]byte(nil), cr.Body...)
	b, err := BuildRequest(cr, Target{Protocol: Anthropic, Model: "claude-x", Stream: true, MaxOutputTokens: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got anRequest
	if err := json.Unmarshal(b.Body, &got); err != nil {
		t.Fatal(err)
	}
	var sys string
	_ = json.Unmarshal(got.System, &sys)
	if got.Model != "claude-x" || got.MaxTokens != 300 || !got.Stream || sys != "Be brief.\n\nUse metric units." || got.StopSequences[0] != "END" {
		t.Fatalf("top level %+v system %q", got, sys)
	}
	roles := []string{}
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
	}
	// user, assistant(tool_use), user(tool_result + next question merged): turns alternate.
	if strings.Join(roles, ",") != "user,assistant,user" {
		t.Fatalf("roles %v", roles)
	}
	s := string(b.Body)
	for _, want := range []string{`{"source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="},"type":"image"}`,
		`{"id":"call_1","input":{"id":7},"name":"lookup","type":"tool_use"}`, `"tool_use_id":"call_1","type":"tool_result"`,
		`"tool_choice":{"type":"tool","name":"lookup"}`, `"input_schema":{"type":"object"}`} {
		if !strings.Contains(s, want) {
			t.Errorf("anthropic body lacks %s\n%s", want, s)
		}
	}
	if !bytes.Equal(before, cr.Body) || cr.IR.Messages[0].Role != "user" {
		t.Fatal("the translator mutated its input")
	}
}

const anthropicFull = `{"model":"chat","max_tokens":200,"system":[{"type":"text","text":"Be brief."}],"stop_sequences":["END"],
 "messages":[
  {"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]},
  {"role":"assistant","content":[{"type":"text","text":"Looking it up."},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"id":7}}]},
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a red bicycle"}]},{"type":"text","text":"Thanks"}]}],
 "tools":[{"name":"lookup","description":"find things","input_schema":{"type":"object"}}],
 "tool_choice":{"type":"any"},"metadata":{"user_id":"u-42"}}`

func TestAnthropicRequestToOpenAI(t *testing.T) {
	cr := mustParse(t, Anthropic, anthropicFull)
	b, err := BuildRequest(cr, Target{Protocol: OpenAI, Model: "gpt-x", Stream: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeMap(t, b.Body)
	msgs := m["messages"].([]any)
	roles := []string{}
	for _, x := range msgs {
		roles = append(roles, x.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,user" {
		t.Fatalf("roles %v", roles)
	}
	s := string(b.Body)
	for _, want := range []string{`"image_url":{"url":"https://example.com/a.png"}`, `"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"lookup","arguments":"{\"id\":7}"}}]`,
		`"tool_call_id":"toolu_1"`, `"content":"a red bicycle"`, `"tool_choice":"required"`, `"stream_options":{"include_usage":true}`,
		`"max_tokens":200`, `"stop":["END"]`, `"user":"u-42"`} {
		if !strings.Contains(s, want) {
			t.Errorf("openai body lacks %s\n%s", want, s)
		}
	}
}

func TestSameProtocolKeepsUnmodelledFields(t *testing.T) {
	cr := mustParse(t, OpenAI, openaiFull)
	b, err := BuildRequest(cr, Target{Protocol: OpenAI, Model: "gpt-4o-2024-08-06", Stream: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeMap(t, b.Body)
	if m["model"] != "gpt-4o-2024-08-06" || m["seed"] != 7.0 || m["logprobs"] != false || m["stream"] != true ||
		m["stream_options"].(map[string]any)["include_usage"] != true {
		t.Fatalf("patched body %s", b.Body)
	}
	cr = mustParse(t, Anthropic, anthropicFull)
	b, err = BuildRequest(cr, Target{Protocol: Anthropic, Model: "claude-x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := decodeMap(t, b.Body); m["model"] != "claude-x" || m["metadata"].(map[string]any)["user_id"] != "u-42" || m["stream"] != nil {
		t.Fatalf("patched body %s", b.Body)
	}
}

func TestContinuationStyles(t *testing.T) {
	const oa = `{"model":"chat","messages":[{"role":"user","content":"Tell me"}]}`
	prefix := "Once upon a time"
	tests := []struct {
		name   string
		client Protocol
		body   string
		target Target
		want   []string
	}{
		{"openai prefill", OpenAI, oa, Target{Protocol: OpenAI, Model: "m", Continuation: ContinuePrefill},
			[]string{`{"role":"assistant","content":"Once upon a time"}]`}},
		{"prefix flag", OpenAI, oa, Target{Protocol: OpenAI, Model: "m", Continuation: ContinuePrefix},
			[]string{`"prefix":true`, `"content":"Once upon a time"`}},
		{"vllm continue_final_message", OpenAI, oa, Target{Protocol: OpenAI, Model: "m", Continuation: ContinueFinalMsg},
			[]string{`"continue_final_message":true`, `"add_generation_prompt":false`, `"content":"Once upon a time"`}},
		{"anthropic prefill", Anthropic, `{"model":"c","max_tokens":9,"messages":[{"role":"user","content":"Tell me"}]}`,
			Target{Protocol: Anthropic, Model: "m", Continuation: ContinuePrefill}, []string{`{"role":"assistant","content":"Once upon a time"}]`}},
		{"cross-protocol prefill", Anthropic, `{"model":"c","max_tokens":9,"messages":[{"role":"user","content":"Tell me"}]}`,
			Target{Protocol: OpenAI, Model: "m", Continuation: ContinuePrefix}, []string{`"prefix":true`, `"role":"assistant"`}},
		{"the client's own prefill is extended, not duplicated", Anthropic,
			`{"model":"c","max_tokens":9,"messages":[{"role":"user","content":"JSON please"},{"role":"assistant","content":"{"}]}`,
			Target{Protocol: Anthropic, Model: "m", Continuation: ContinuePrefill}, []string{`{"role":"assistant","content":"{Once upon a time"}]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cr := mustParse(t, tc.client, tc.body)
			b, err := BuildRequest(cr, tc.target, &prefix)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b.Body), w) {
					t.Fatalf("body lacks %s:\n%s", w, b.Body)
				}
			}
			if strings.Count(string(b.Body), `"role":"assistant"`) != 1 {
				t.Fatalf("exactly one assistant message expected:\n%s", b.Body)
			}
			if b.PromptTokens <= cr.PromptTokens {
				t.Fatal("the continuation's prompt estimate must include the prefix")
			}
			if n := len(cr.IR.Messages); cr.IR.Messages[n-1].Role == RoleAssistant && cr.IR.Messages[n-1].Text() != "{" {
				t.Fatal("BuildRequest mutated the client request")
			}
		})
	}
}

func TestResponseTranslation(t *testing.T) {
	an := []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"id":7}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":4}}`)
	r, err := DecodeResponse(Anthropic, an)
	if err != nil {
		t.Fatal(err)
	}
	out := decodeMap(t, EncodeResponse(OpenAI, r, "chatcmpl-x"))
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	usage := out["usage"].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || msg["content"] != "Hi" || usage["prompt_tokens"] != 14.0 || usage["completion_tokens"] != 5.0 || out["model"] != "claude-x" {
		t.Fatalf("openai response %v", out)
	}
	oa := []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`)
	r, err = DecodeResponse(OpenAI, oa)
	if err != nil {
		t.Fatal(err)
	}
	back := decodeMap(t, EncodeResponse(Anthropic, r, "msg_x"))
	if back["stop_reason"] != "max_tokens" || back["type"] != "message" || back["content"].([]any)[0].(map[string]any)["text"] != "Hello" {
		t.Fatalf("anthropic response %v", back)
	}
	for _, bad := range []string{`{"choices":[]}`, `not json`} {
		if _, err := DecodeResponse(OpenAI, []byte(bad)); err == nil {
			t.Errorf("%s must not decode", bad)
		}
	}
	if _, err := DecodeResponse(Anthropic, []byte(`{"type":"error"}`)); err == nil {
		t.Error("an error object is not a message")
	}
}

// An answer of several choices is written as that many Chat Completions
// choices, each with its index, message and finish reason.
func TestResponseOfSeveralChoices(t *testing.T) {
	r := &Response{Model: "m", Text: "one", Finish: FinishStop, Usage: gw.Usage{InputTokens: 3, OutputTokens: 9}, Others: []Choice{
		{Text: "two", Finish: FinishLength},
		{ToolCalls: []ToolCall{{ID: "call_1", Name: "lookup", Arguments: "{}"}}, Finish: FinishToolCalls},
		{Refusal: "no", Finish: FinishContentFilter}}}
	var out struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content   *string `json:"content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(EncodeResponse(OpenAI, r, "chatcmpl-x"), &out); err != nil {
		t.Fatal(err)
	}
	c := out.Choices
	if len(c) != 4 || out.Usage.CompletionTokens != 9 {
		t.Fatalf("%+v", out)
	}
	for i, want := range []string{"stop", "length", "tool_calls", "content_filter"} {
		if c[i].Index != i || c[i].FinishReason != want {
			t.Errorf("choice %d: index %d finish %q, want %q", i, c[i].Index, c[i].FinishReason, want)
		}
	}
	if *c[0].Message.Content != "one" || *c[1].Message.Content != "two" || c[2].Message.Content != nil || c[2].Message.ToolCalls[0].ID != "call_1" ||
		c[3].Message.Refusal == nil || *c[3].Message.Refusal != "no" || c[3].Message.Content != nil {
		t.Errorf("choices %+v", c)
	}
}

func TestParseRequestRejectsClearly(t *testing.T) {
	for name, tc := range map[string]struct {
		p     Protocol
		body  string
		param string
	}{
		"openai content type": {OpenAI, `{"model":"m","messages":[{"role":"user","content":42}]}`, "messages[0].content"},
		"openai part type":    {OpenAI, `{"model":"m","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, "messages[0].content[0].type"},
		"openai tool no id":   {OpenAI, `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id"},
		"openai tool choice":  {OpenAI, `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"}`, "tool_choice"},
		"anthropic role":      {Anthropic, `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role"},
		"anthropic block":     {Anthropic, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, "messages[0].content[0].type"},
		"anthropic no model":  {Anthropic, `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, "model"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseRequest(tc.p, []byte(tc.body))
			inv, ok := err.(*InvalidRequestError)
			if !ok || inv.Param != tc.param || inv.Message == "" {
				t.Fatalf("got %v, want an error naming %s", err, tc.param)
			}
		})
	}
}

// FuzzReplaceModel: the fast model rewrite, when it applies, yields the
// same document as decoding, setting "model" and re-encoding.
func FuzzReplaceModel(f *testing.F) {
	f.Add([]byte(`{"model":"chat","messages":[{"role":"user","content":"x"}]}`), "gpt-4o")
	f.Add([]byte(` { "messages" : [ {"content":"a\"}b","role":"user"} ], "model" : "m" , "n":1}`), "m2")
	f.Add([]byte(`{"a":{"model":"inner"},"model":"outer"}`), "x")
	f.Add([]byte(`{"model":"a","model":"b"}`), "x")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		out, ok := replaceModel(body, model)
		if !ok {
			return
		}
		var want, got map[string]any
		if json.Unmarshal(body, &want) != nil {
			return // not a valid document: the caller would have rejected it already
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewrite broke the document: %q → %q", body, out)
		}
		want["model"] = model
		wb, _ := json.Marshal(want) // both through encoding/json: equal documents, equal bytes
		var w2 map[string]any
		_ = json.Unmarshal(wb, &w2)
		if !reflect.DeepEqual(w2, got) {
			t.Fatalf("%q with model %q:\n got  %v\n want %v", body, model, got, w2)
		}
	})
}

// The upstream output limit is the target's, on every protocol pair, in
// the field the client used (max_tokens when it used none), and on a
// continuation; a body already at the limit is left as the client wrote it.
func TestTheUpstreamLimitIsTheTargets(t *testing.T) {
	prefix := "Partial answer"
	for _, c := range []struct {
		name      string
		in        Protocol
		body      string
		to        Protocol
		cont      bool
		wantField string
	}{
		{"openai max_tokens above", OpenAI, `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, OpenAI, false, "max_tokens"},
		{"openai max_completion_tokens above", OpenAI, `{"model":"m","max_completion_tokens":5000,"max_tokens":9000,"messages":[{"role":"user","content":"hi"}]}`, OpenAI, false, "max_completion_tokens"},
		{"openai none", OpenAI, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, OpenAI, false, "max_tokens"},
		{"openai stream none", OpenAI, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, OpenAI, false, "max_tokens"},
		{"openai continuation", OpenAI, `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, OpenAI, true, "max_tokens"},
		{"anthropic above", Anthropic, `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, Anthropic, false, "max_tokens"},
		{"anthropic continuation", Anthropic, `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, Anthropic, true, "max_tokens"},
		{"openai to anthropic, none", OpenAI, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, Anthropic, false, "max_tokens"},
		{"openai to anthropic, above", OpenAI, `{"model":"m","max_completion_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, Anthropic, false, "max_tokens"},
		{"anthropic to openai, above", Anthropic, `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`, OpenAI, false, "max_tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p *string
			if c.cont {
				p = &prefix
			}
			built, err := BuildRequest(mustParse(t, c.in, c.body), Target{Protocol: c.to, Model: "up", MaxOutputTokens: 1000, MaxTokens: 700,
				Continuation: ContinuePrefill}, p)
			if err != nil {
				t.Fatal(err)
			}
			m := decodeMap(t, built.Body)
			if got, _ := m[c.wantField].(float64); got != 700 {
				t.Fatalf("%s = %v, want 700: %s", c.wantField, m[c.wantField], built.Body)
			}
			for _, other := range []string{"max_tokens", "max_completion_tokens"} {
				if v, ok := m[other]; ok && other != c.wantField {
					t.Fatalf("%s = %v beside %s: %s", other, v, c.wantField, built.Body)
				}
			}
		})
	}
	// At the limit already: the client's body goes as it is (but the model).
	body := `{"model":"m","max_tokens":700,"messages":[{"role":"user","content":"hi"}]}`
	built, err := BuildRequest(mustParse(t, OpenAI, body), Target{Protocol: OpenAI, Model: "up", MaxTokens: 700}, nil)
	if err != nil || string(built.Body) != strings.Replace(body, `"m"`, `"up"`, 1) {
		t.Fatalf("%s %v", built.Body, err)
	}
}

// topLevelMembers agrees with encoding/json on every valid object —
// same members, equivalent values — and encodeMembers writes them back as
// an object encoding/json reads the same; on anything else it never
// panics.
func FuzzTopLevelMembers(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{}`, ` { "a" : 1 , "b":[1,{"c":"}"}]} `,
		`{"a":"x\"y","b":null,"c":true,"d":-1.5e3}`, `{"a":1,"a":2}`, `{"\u0061":1}`, `[1]`, `{"a":}`, `{"a":1}x`, `{"a":tru}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := topLevelMembers(body)
		var want map[string]json.RawMessage
		if json.Unmarshal(body, &want) != nil || want == nil {
			return // not an object: only "no panic" is promised (callers validate first)
		}
		if err != nil {
			t.Fatalf("encoding/json reads %q, topLevelMembers fails: %v", body, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d members, encoding/json %d", body, len(got), len(want))
		}
		for k, w := range want {
			if !jsonEqual(t, got[k], w) {
				t.Fatalf("%q: member %q is %s, encoding/json %s", body, k, got[k], w)
			}
		}
		var back map[string]json.RawMessage
		if err := json.Unmarshal(encodeMembers(got), &back); err != nil || len(back) != len(want) {
			t.Fatalf("encodeMembers wrote %s: %v", encodeMembers(got), err)
		}
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// takeDropParams takes a request's drop_params out and nothing else: for
// every body the parser accepts, the body it leaves is an object
// encoding/json reads with every other member as it was and no
// drop_params, and the value it read is the one that was there.
func FuzzTakeDropParams(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}],"drop_params":true}`,
		`{"drop_params":false,"model":"m","messages":[{"role":"user","content":"x"}]}`, `{"model":"m","messages":[{"role":"user","content":"x"}],"drop_params":null}`,
		`{"model":"m","messages":[{"role":"user","content":"drop_params"}]}`, `{"model":"m","messages":[{"role":"user","content":"x"}],"drop_params":1}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"drop\u005fparams":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cr, err := ParseRequest(OpenAI, body)
		if err != nil {
			return
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(body, &before) != nil {
			t.Fatalf("ParseRequest accepted %q, which encoding/json does not read", body)
		}
		if err := json.Unmarshal(cr.Body, &after); err != nil {
			t.Fatalf("%q left %q: %v", body, cr.Body, err)
		}
		if _, ok := after["drop_params"]; ok {
			t.Fatalf("%q left drop_params in %q", body, cr.Body)
		}
		was, had := before["drop_params"]
		if had {
			delete(before, "drop_params")
		}
		if len(after) != len(before) {
			t.Fatalf("%q left %d other members, not %d", body, len(after), len(before))
		}
		for k, v := range before {
			if !jsonEqual(t, after[k], v) {
				t.Fatalf("%q: member %q became %s", body, k, after[k])
			}
		}
		switch {
		case !had || string(bytes.TrimSpace(was)) == "null":
			if cr.DropParams != nil {
				t.Fatalf("%q: drop_params read as %v", body, *cr.DropParams)
			}
		case cr.DropParams == nil || *cr.DropParams != (string(bytes.TrimSpace(was)) == "true"):
			t.Fatalf("%q: drop_params %s read as %v", body, was, cr.DropParams)
		}
	})
}
