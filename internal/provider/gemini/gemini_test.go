package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

func parse(t *testing.T, p provider.Protocol, body string) *provider.ClientRequest {
	t.Helper()
	in, err := provider.ParseRequest(p, []byte(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return in
}

// decode unmarshals a built body into a generic map for assertions.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("built body is not JSON: %v\n%s", err, b)
	}
	return m
}

func jsonEq(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want for %s: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("%s:\n got %s\nwant %s", what, g, want)
	}
}

func TestBuildFromOpenAI(t *testing.T) {
	in := parse(t, provider.OpenAI, `{
	  "model": "chat", "max_tokens": 200, "temperature": 1.5, "top_p": 0.9, "stop": ["END"], "seed": 7,
	  "frequency_penalty": 0.5, "presence_penalty": 0.25,
	  "messages": [
	    {"role": "system", "content": "Be brief."},
	    {"role": "user", "content": [{"type": "text", "text": "What is in this image?"},
	      {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
	    {"role": "assistant", "content": null, "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\":21}"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "noon"}
	  ],
	  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
	            {"type": "function", "function": {"name": "get_time"}}],
	  "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
	  "response_format": {"type": "json_schema", "json_schema": {"name": "out", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
	}`)
	b, err := BuildRequest(in, provider.Target{Model: "gemini-2.5-flash", MaxOutputTokens: 8192}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, b)
	jsonEq(t, "systemInstruction", m["systemInstruction"], `{"parts":[{"text":"Be brief."}]}`)
	jsonEq(t, "contents", m["contents"], `[
	  {"role":"user","parts":[{"text":"What is in this image?"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}]},
	  {"role":"model","parts":[
	    {"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"skip_thought_signature_validator"},
	    {"functionCall":{"name":"get_time","args":{}}}]},
	  {"role":"user","parts":[
	    {"functionResponse":{"name":"get_weather","response":{"temp":21}}},
	    {"functionResponse":{"name":"get_time","response":{"output":"noon"}}}]}]`)
	jsonEq(t, "tools", m["tools"], `[{"functionDeclarations":[
	  {"name":"get_weather","description":"Weather","parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}},
	  {"name":"get_time"}]}]`)
	jsonEq(t, "toolConfig", m["toolConfig"], `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}`)
	jsonEq(t, "generationConfig", m["generationConfig"], `{"maxOutputTokens":200,"temperature":1.5,"topP":0.9,"stopSequences":["END"],"seed":7,
	  "frequencyPenalty":0.5,"presencePenalty":0.25,"responseMimeType":"application/json","responseJsonSchema":{"type":"object","properties":{"a":{"type":"integer"}}}}`)
	if len(m) != 5 {
		t.Errorf("unexpected members: %v", m)
	}
}

func TestBuildFromAnthropic(t *testing.T) {
	in := parse(t, provider.Anthropic, `{
	  "model": "chat", "max_tokens": 100, "top_k": 40, "system": [{"type":"text","text":"Sys"}],
	  "messages": [
	    {"role": "user", "content": [{"type":"text","text":"Hi"},{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4A=="}},
	      {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]},
	    {"role": "assistant", "content": [{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"x"}}]},
	    {"role": "user", "content": [{"type":"tool_result","tool_use_id":"toolu_1","content":"boom","is_error":true}]}
	  ],
	  "tools": [{"name":"lookup","input_schema":{"type":"object"}}],
	  "tool_choice": {"type":"any"}
	}`)
	b, err := BuildRequest(in, provider.Target{Model: "gemini-2.5-pro", MaxTokens: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, b)
	jsonEq(t, "systemInstruction", m["systemInstruction"], `{"parts":[{"text":"Sys"}]}`)
	jsonEq(t, "contents", m["contents"], `[
	  {"role":"user","parts":[{"text":"Hi"},{"inlineData":{"mimeType":"image/jpeg","data":"/9j/4A=="}},{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}}]},
	  {"role":"model","parts":[{"text":"Checking."},{"functionCall":{"name":"lookup","args":{"q":"x"}},"thoughtSignature":"skip_thought_signature_validator"}]},
	  {"role":"user","parts":[{"functionResponse":{"name":"lookup","response":{"error":"boom"}}}]}]`)
	jsonEq(t, "toolConfig", m["toolConfig"], `{"functionCallingConfig":{"mode":"ANY"}}`)
	jsonEq(t, "generationConfig", m["generationConfig"], `{"maxOutputTokens":64,"topK":40}`)
}

func TestBuildRefusesByName(t *testing.T) {
	cases := []struct {
		name, body, param string
	}{
		{"image by URL", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, "messages[0].content[0]"},
		{"orphan tool result", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"nope","content":"r"}]}`, "messages[1].tool_call_id"},
		{"parallel off", `{"model":"m","parallel_tool_calls":false,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"x"}]}`, "parallel_tool_calls"},
		{"arguments not an object", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[1].tool_calls[0].function.arguments"},
		{"file by id", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "messages[0].content[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := BuildRequest(parse(t, provider.OpenAI, c.body), provider.Target{Model: "g"}, nil)
			var ie *provider.InvalidRequestError
			if !errors.As(err, &ie) || ie.Param != c.param {
				t.Fatalf("err = %v, want an invalid request naming %s", err, c.param)
			}
		})
	}
	prefix := "partial"
	if _, err := BuildRequest(parse(t, provider.OpenAI, `{"model":"m","messages":[{"role":"user","content":"x"}]}`), provider.Target{}, &prefix); err == nil {
		t.Fatal("a continuation was built for Gemini, which declares none")
	}
}

func TestNativeOnly(t *testing.T) {
	got := NativeOnly(provider.OpenAI, []byte(`{"model":"m","messages":[],"user":"u","logprobs":true,"parallel_tool_calls":false,
	  "seed":1,"response_format":{"type":"json_object"},"temperature":1.7,"store":false,"x_vendor":1,"n":1}`))
	want := []string{"logprobs", "parallel_tool_calls", "user", "x_vendor"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("openai native only = %v, want %v", got, want)
	}
	got = NativeOnly(provider.Anthropic, []byte(`{"model":"m","messages":[],"max_tokens":5,"top_k":3,"thinking":{"type":"enabled","budget_tokens":1024},
	  "tool_choice":{"type":"auto","disable_parallel_tool_use":true},"metadata":{"user_id":"u"}}`))
	want = []string{"metadata", "thinking", "tool_choice"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("anthropic native only = %v, want %v", got, want)
	}
	if got := NativeOnly(provider.Anthropic, []byte(`{"model":"m","messages":[],"max_tokens":5,"tool_choice":{"type":"any"},"thinking":{"type":"disabled"}}`)); len(got) != 0 {
		t.Errorf("neutral values made a Gemini route ineligible: %v", got)
	}
}

// TestFieldColumnComplete holds the gemini column to the product's field
// table: every field either protocol knows has a fate on Gemini routes.
func TestFieldColumnComplete(t *testing.T) {
	for _, f := range provider.Fields {
		g := fieldIndex[f.Protocol][f.Name]
		if g == nil {
			t.Errorf("%s field %q has no gemini fate", f.Protocol, f.Name)
			continue
		}
		if f.Fate == provider.FateGateway && g.Fate != provider.FateGateway {
			t.Errorf("%s %q: gateway field with gemini fate %s", f.Protocol, f.Name, g.Fate)
		}
		if f.Fate == provider.FateRejected && g.Fate != provider.FateRejected {
			t.Errorf("%s %q is rejected everywhere but not for gemini", f.Protocol, f.Name)
		}
		if g.Fate == provider.FateTranslated && g.To == "" {
			t.Errorf("%s %q: translated with no Gemini member named", f.Protocol, f.Name)
		}
		// A sample that asks for something must be built, or refused.
		if f.Sample != "" && FateOf(f.Protocol, f.Name, json.RawMessage(f.Sample)) == provider.FateTranslated {
			body := `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"x"}]`
			if f.Protocol == provider.Anthropic {
				body = `{"model":"m","tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]`
				if f.Name != "max_tokens" {
					body += `,"max_tokens":9`
				}
			}
			if f.Name != "messages" {
				body += `,"` + f.Name + `":` + f.Sample
			}
			in, err := provider.ParseRequest(f.Protocol, []byte(body+"}"))
			if err != nil {
				t.Errorf("%s %q sample: %v", f.Protocol, f.Name, err)
				continue
			}
			b, err := BuildRequest(in, provider.Target{Model: "g"}, nil)
			if err != nil {
				t.Errorf("%s %q sample %s: translated field not built: %v", f.Protocol, f.Name, f.Sample, err)
				continue
			}
			path := strings.ReplaceAll(strings.Split(g.To, ",")[0], "[]", "")
			if !hasPath(b, path) {
				t.Errorf("%s %q sample %s: %s missing from %s", f.Protocol, f.Name, f.Sample, path, b)
			}
		}
		// A sample of a field Gemini cannot carry keeps the route off.
		if f.Sample != "" && FateOf(f.Protocol, f.Name, json.RawMessage(f.Sample)) == provider.FateNativeOnly {
			body := `{"model":"m","messages":[],"` + f.Name + `":` + f.Sample + `}`
			if !slices.Contains(NativeOnly(f.Protocol, []byte(body)), f.Name) {
				t.Errorf("%s %q sample %s: not native only for gemini", f.Protocol, f.Name, f.Sample)
			}
		}
	}
	for _, g := range Fields {
		found := false
		for _, f := range provider.Fields {
			found = found || f.Protocol == g.Protocol && f.Name == g.Name
		}
		if !found {
			t.Errorf("gemini column has %s %q, which the field table lacks", g.Protocol, g.Name)
		}
	}
}

// hasPath reports whether a dotted path of object members exists in b
// (an array on the way is entered at its first element).
func hasPath(b []byte, path string) bool {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	for _, k := range strings.Split(path, ".") {
		if arr, ok := v.([]any); ok && len(arr) > 0 {
			v = arr[0]
		}
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

func TestDecodeText(t *testing.T) {
	b, _ := os.ReadFile("testdata/text_answer.json")
	r, err := DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Text, "Once upon a time") || r.Finish != provider.FinishStop || r.Model != "gemini-2.5-flash" || r.ID != "mTlRaJbcGNW8nvgPqcrO6Ag" {
		t.Errorf("response = %+v", r)
	}
	if want := (gw.Usage{InputTokens: 8, OutputTokens: 33, CachedTokens: 2}); r.Usage != want {
		t.Errorf("usage = %+v, want %+v (thinking tokens are output)", r.Usage, want)
	}
}

func TestDecodeFunctionCalls(t *testing.T) {
	b, _ := os.ReadFile("testdata/function_call.json")
	r, err := DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Finish != provider.FinishToolCalls || len(r.ToolCalls) != 2 {
		t.Fatalf("response = %+v", r)
	}
	if c := r.ToolCalls[0]; c.Name != "schedule_meeting" || !json.Valid([]byte(c.Arguments)) || !strings.HasPrefix(c.ID, "call_") {
		t.Errorf("call 0 = %+v", c)
	}
	if r.ToolCalls[0].ID == r.ToolCalls[1].ID {
		t.Error("two calls share an id")
	}
}

func TestDecodeWithheld(t *testing.T) {
	for _, reason := range []string{"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE", "OTHER", "IMAGE_SAFETY"} {
		r, err := DecodeResponse([]byte(`{"candidates":[{"content":{"role":"model","parts":[]},"finishReason":"` + reason + `"}],"usageMetadata":{"promptTokenCount":3}}`))
		if err != nil {
			t.Fatal(err)
		}
		if r.Finish != provider.FinishContentFilter || !strings.Contains(r.Refusal, reason) {
			t.Errorf("%s: finish %q refusal %q, want content_filter with a refusal", reason, r.Finish, r.Refusal)
		}
	}
	r, err := DecodeResponse([]byte(`{"candidates":[{"content":{"role":"model","parts":[{"text":"partial"}]},"finishReason":"SAFETY"}]}`))
	if err != nil || r.Finish != provider.FinishContentFilter || r.Text != "partial" {
		t.Errorf("partial answer cut by safety: %+v %v", r, err)
	}
	r, err = DecodeResponse([]byte(`{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":4,"totalTokenCount":4}}`))
	if err != nil || r.Finish != provider.FinishContentFilter || !strings.Contains(r.Refusal, "PROHIBITED_CONTENT") || r.Usage.InputTokens != 4 {
		t.Errorf("blocked prompt: %+v %v", r, err)
	}
	r, err = DecodeResponse([]byte(`{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"MAX_TOKENS"}]}`))
	if err != nil || r.Finish != provider.FinishLength {
		t.Errorf("max tokens: %+v %v", r, err)
	}
	_, err = DecodeResponse([]byte(`{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL","finishMessage":"Malformed function call: print(x"}]}`))
	var fg *FailedGeneration
	if !errors.As(err, &fg) {
		t.Fatalf("malformed call: err = %v", err)
	}
	if k, _ := Classify(fg.UpstreamError()); k != gw.KindUnavailable {
		t.Errorf("malformed call classified %s", k)
	}
	for _, bad := range []string{`not json`, `{}`, `[]`, `{"error":{"code":500}}`} {
		if _, err := DecodeResponse([]byte(bad)); err == nil {
			t.Errorf("%s decoded as an answer", bad)
		}
	}
}

// events decodes an SSE stream with the product's SSE reader.
func events(t *testing.T, stream []byte) ([]provider.Event, int) {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(stream), 1<<20)
	d := NewDecoder()
	var out []provider.Event
	warnings := 0
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out, warnings
		}
		if err != nil {
			t.Fatalf("sse: %v", err)
		}
		var derr error
		if out, derr = d.Decode(ev, out); derr != nil {
			warnings++
		}
	}
}

func TestStream(t *testing.T) {
	b, _ := os.ReadFile("testdata/stream.sse")
	evs, warnings := events(t, b)
	if warnings != 0 {
		t.Fatalf("%d warnings", warnings)
	}
	var text string
	var finish string
	var usage gw.Usage
	for _, e := range evs {
		switch e.Kind {
		case provider.EvText:
			text += e.Text
		case provider.EvFinish:
			finish = e.Finish
		case provider.EvUsage:
			usage = e.Usage
		}
	}
	if evs[0].Kind != provider.EvStart || evs[0].ID != "abc123" || evs[0].Model != "gemini-2.5-flash" {
		t.Errorf("first event %+v", evs[0])
	}
	if text != "The quick brown fox jumps." || finish != provider.FinishStop || usage != (gw.Usage{InputTokens: 9, OutputTokens: 11}) {
		t.Errorf("text %q finish %q usage %+v", text, finish, usage)
	}
	if last := evs[len(evs)-1]; last.Kind != provider.EvFinish {
		t.Errorf("last event %+v, want the finish after usage", last)
	}
}

func TestStreamToolsRefusalsErrors(t *testing.T) {
	evs, _ := events(t, []byte(`data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{"a":1}}},{"functionCall":{"name":"g"}}]},"finishReason":"STOP"}],"responseId":"r1"}`+"\n\n"))
	var kinds []provider.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	want := []provider.EventKind{provider.EvStart, provider.EvToolStart, provider.EvToolArgs, provider.EvToolStart, provider.EvToolArgs, provider.EvFinish}
	if !reflect.DeepEqual(kinds, want) || evs[2].Args != `{"a":1}` || evs[4].Args != "{}" || evs[3].ToolIndex != 1 || evs[5].Finish != provider.FinishToolCalls || evs[1].ToolID != "call_r1_0" {
		t.Errorf("tool stream = %+v", evs)
	}

	evs, _ = events(t, []byte("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":3}}\n\n"))
	if evs[1].Kind != provider.EvRefusal || !evs[1].Visible() || evs[len(evs)-1].Finish != provider.FinishContentFilter {
		t.Errorf("blocked prompt stream = %+v", evs)
	}

	evs, _ = events(t, []byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}]}}]}\n\ndata: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n"))
	last := evs[len(evs)-1]
	if last.Kind != provider.EvError || last.Err.Status != 503 || last.Err.Type != "UNAVAILABLE" {
		t.Fatalf("in-stream error = %+v", last)
	}
	if k, _ := ClassifyStreamError(last.Err); k != gw.KindUnavailable {
		t.Errorf("in-stream UNAVAILABLE classified %s", k)
	}

	evs, warnings := events(t, []byte("data: {not json\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ok\"}]},\"finishReason\":\"RECITATION\"}]}\n\n"))
	if warnings != 1 || evs[len(evs)-1].Finish != provider.FinishContentFilter {
		t.Errorf("warnings %d events %+v", warnings, evs)
	}

	evs, _ = events(t, []byte("data: {\"candidates\":[{\"finishReason\":\"MALFORMED_FUNCTION_CALL\"}]}\n\n"))
	if last := evs[len(evs)-1]; last.Kind != provider.EvError {
		t.Errorf("malformed call in stream = %+v", evs)
	} else if k, _ := ClassifyStreamError(last.Err); k != gw.KindUnavailable {
		t.Errorf("malformed call in stream classified %s", k)
	}
}

func TestClassify(t *testing.T) {
	file := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	googleErr := func(code int, status, msg string) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "status": status, "message": msg}})
		return b
	}
	cases := []struct {
		name   string
		status int
		body   []byte
		kind   gw.Kind
		cause  gw.Cause
	}{
		{"api key invalid", 400, file("api_key_invalid.json"), gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"per-minute quota", 429, file("quota_per_minute.json"), gw.KindRateLimited, ""},
		{"per-day quota", 429, file("quota_per_day.json"), gw.KindAccountRefused, gw.CauseQuota},
		{"unavailable", 503, googleErr(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), gw.KindUnavailable, ""},
		{"internal", 500, googleErr(500, "INTERNAL", "An internal error has occurred."), gw.KindUnavailable, ""},
		{"deadline", 504, googleErr(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."), gw.KindUnavailable, ""},
		{"invalid argument", 400, googleErr(400, "INVALID_ARGUMENT", "Request contains an invalid argument."), gw.KindRejected, ""},
		{"context", 400, googleErr(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."), gw.KindRejected, gw.CauseContextLength},
		{"permission denied", 403, googleErr(403, "PERMISSION_DENIED", "Permission 'aiplatform.endpoints.predict' denied on resource"), gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"scope", 403, []byte(`{"error":{"code":403,"message":"Request had insufficient authentication scopes.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"ACCESS_TOKEN_SCOPE_INSUFFICIENT"}]}}`), gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{"unauthenticated", 401, googleErr(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."), gw.KindAccountRefused, gw.CauseUpstreamAuth},
		// The route's model missing is the route's fault; an object the
		// request names is not.
		{"model not found", 404, file("model_not_found.json"), gw.KindRouteUnavailable, ""},
		{"vertex publisher model not found", 404, file("vertex_model_not_found.json"), gw.KindRouteUnavailable, ""},
		{"model name format", 400, googleErr(400, "INVALID_ARGUMENT", "* GenerateContentRequest.model: unexpected model name format\n"), gw.KindRouteUnavailable, ""},
		{"a path not served", 404, []byte(`<!DOCTYPE html><html lang=en><title>Error 404 (Not Found)!!1</title><p>The requested URL <code>/v1beta/modelz/gemini:generateContent</code> was not found on this server.</html>`), gw.KindRouteUnavailable, ""},
		{"cached content not found", 404, googleErr(404, "NOT_FOUND", "CachedContent not found (or permission denied): cachedContents/abc123"), gw.KindRejected, ""},
		{"file not found", 404, googleErr(404, "NOT_FOUND", "File files/abc123 not found."), gw.KindRejected, ""},
		{"location", 400, googleErr(400, "FAILED_PRECONDITION", "User location is not supported for the API use."), gw.KindAccountRefused, gw.CauseQuota},
		{"array", 429, []byte(`[{"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED"}}]`), gw.KindRateLimited, ""},
		{"anthropic on vertex", 529, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), gw.KindUnavailable, ""},
		{"anthropic invalid", 400, []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 300000 tokens > 200000 maximum"}}`), gw.KindRejected, gw.CauseContextLength},
		{"html", 502, []byte(`<html>Bad Gateway</html>`), gw.KindUnavailable, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := ParseError(c.status, c.body)
			k, cause := Classify(e)
			if k != c.kind || cause != c.cause {
				t.Errorf("%+v: got %s/%s, want %s/%s", e, k, cause, c.kind, c.cause)
			}
		})
	}
	e := ParseError(400, file("api_key_invalid.json"))
	if e.Type != "INVALID_ARGUMENT" || e.Code != "API_KEY_INVALID" || e.Status != 400 {
		t.Errorf("parsed %+v", e)
	}
}

func FuzzParseGoogleError(f *testing.F) {
	for _, name := range []string{"api_key_invalid.json", "quota_per_minute.json", "quota_per_day.json"} {
		b, _ := os.ReadFile("testdata/" + name)
		f.Add(400, b)
	}
	f.Add(0, []byte(`[{"error":{"code":"x","status":7,"details":[1,{"@type":5}]}}]`))
	f.Add(503, []byte(`{"error":{"code":503,"message":"\u0000\n","status":"UNAVAILABLE\n"}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := ParseError(status, body)
		k, _ := Classify(e)
		if !k.Valid() {
			t.Fatalf("invalid kind %q", k)
		}
		for _, s := range []string{e.Type, e.Code, e.Message, e.Param} {
			if strings.ContainsAny(s, "\r\n\x00") || len(s) > 1024 {
				t.Fatalf("unsafe field %q", s)
			}
		}
	})
}

func FuzzDecodeGeminiStream(f *testing.F) {
	b, _ := os.ReadFile("testdata/stream.sse")
	f.Add(b)
	f.Add([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":[1]}}]},\"finishReason\":\"STOP\"}]}\n\n"))
	f.Add([]byte("data: {\"error\":{\"code\":429}}\n\ndata: {\"promptFeedback\":{\"blockReason\":\"X\"}}\n\n"))
	f.Add([]byte("data: {\"candidates\":[null,{}],\"usageMetadata\":{\"promptTokenCount\":-1}}\n\n"))
	b, _ = os.ReadFile("testdata/candidates_stream.sse")
	f.Add(b)
	f.Add([]byte("data: {\"candidates\":[{\"index\":1,\"finishReason\":\"STOP\"},{\"index\":1,\"finishReason\":\"SAFETY\"},{\"index\":7}]}\n\ndata: {\"promptFeedback\":{\"blockReason\":\"X\"}}\n\n"))
	b, _ = os.ReadFile("testdata/candidates.json")
	f.Add(b)
	f.Fuzz(func(t *testing.T, stream []byte) {
		rd := sse.NewReader(bytes.NewReader(stream), 64<<10)
		d := NewDecoder()
		var out []provider.Event
		finished := map[int]int{}
		for i := 0; i < 1000; i++ {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			out, _ = d.Decode(ev, out[:0])
			for _, e := range out {
				if e.Choice < 0 || e.Choice >= provider.MaxChoices {
					t.Fatalf("event of choice %d", e.Choice)
				}
				if e.Kind == provider.EvFinish {
					finished[e.Choice]++
				}
				if e.Kind == provider.EvError && e.Err == nil {
					t.Fatal("error event without an error")
				}
			}
		}
		for c, n := range finished {
			if n > 1 {
				t.Fatalf("choice %d finished %d times", c, n)
			}
		}
		if r, err := DecodeResponse(stream); err == nil && len(r.Others) >= provider.MaxChoices {
			t.Fatalf("%d choices", 1+len(r.Others))
		}
	})
}
