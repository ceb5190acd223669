package mock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// This file is the mock's own reading and writing of the OpenAI Chat
// Completions wire format (platform.openai.com/docs/api-reference/chat),
// written from the API reference and independent of internal/provider.

// oaRequest is the part of a Chat Completions request the mock reads.
type oaRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int64 `json:"max_tokens"`
	MaxCompletionTokens int64 `json:"max_completion_tokens"`
	Tools               []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Logprobs   bool            `json:"logprobs"`
	// N is how many choices to generate (1 to 128; absent or null: 1).
	N *int `json:"n"`
}

// oaContent is a message's content, a string or an array of parts: its
// text (the text parts joined) and its size in the mock's count (each
// text part counted apart, an image, audio or file part as one image).
func oaContent(raw json.RawMessage) (string, int64) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, textTokens(s)
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	var n int64
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
			n += textTokens(p.Text)
		} else {
			n += perImage
		}
	}
	return b.String(), n
}

// decodeOpenAI reads a Chat Completions request; an error is the message
// of a 400. The prompt is counted as docs/mock.md says: per request, per
// message (the system messages joined as one) and per part, tool calls
// and tools by their text.
func decodeOpenAI(body []byte) (*ask, *oaRequest, error) {
	var in oaRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, refusal("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	if len(in.Messages) == 0 {
		return nil, nil, refusal("[] is too short - 'messages'")
	}
	a := &ask{model: in.Model, stream: in.Stream, maxTokens: in.MaxCompletionTokens, choices: 1}
	if in.N != nil {
		switch {
		case *in.N < 1:
			return nil, nil, &badParam{"n", "integer_below_min_value", fmt.Sprintf("Invalid 'n': integer below minimum value. Expected a value >= 1, but got %d instead.", *in.N)}
		case *in.N > 128:
			return nil, nil, &badParam{"n", "integer_above_max_value", fmt.Sprintf("Invalid 'n': integer above maximum value. Expected a value <= 128, but got %d instead.", *in.N)}
		}
		a.choices = *in.N
	}
	if a.maxTokens == 0 {
		a.maxTokens = in.MaxTokens
	}
	var system []string
	n := int64(perRequest)
	for _, m := range in.Messages {
		text, size := oaContent(m.Content)
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, text)
			continue
		}
		n += perMessage + size
		t := turn{role: m.Role, text: text, hasCalls: len(m.ToolCalls) > 0}
		for _, c := range m.ToolCalls {
			t.calls += c.Function.Name + c.Function.Arguments
			n += textTokens(c.Function.Name) + textTokens(c.Function.Arguments)
		}
		a.turns = append(a.turns, t)
	}
	a.system = strings.Join(system, "\n\n")
	if a.system != "" {
		n += perMessage + textTokens(a.system)
	}
	for _, t := range in.Tools {
		a.tools = append(a.tools, t.Function.Name)
		n += textTokens(t.Function.Name) + textTokens(t.Function.Description) + textTokens(string(t.Function.Parameters))
	}
	a.promptTokens = n
	var mode string
	if json.Unmarshal(in.ToolChoice, &mode) == nil {
		a.toolMode = mode
	} else if len(in.ToolChoice) > 0 {
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		_ = json.Unmarshal(in.ToolChoice, &named)
		a.toolMode, a.toolName = "tool", named.Function.Name
	}
	return a, &in, nil
}

// oaWire writes Chat Completions answers; azure adds Azure OpenAI's
// content-filter annotations (learn.microsoft.com/azure/ai-foundry/openai/reference).
type oaWire struct {
	azure bool
	// usage: a stream ends with a usage chunk (stream_options.include_usage).
	usage bool
}

var oaFilterOK = map[string]any{
	"hate":      map[string]any{"filtered": false, "severity": "safe"},
	"self_harm": map[string]any{"filtered": false, "severity": "safe"},
	"sexual":    map[string]any{"filtered": false, "severity": "safe"},
	"violence":  map[string]any{"filtered": false, "severity": "safe"},
}

func oaUsage(u usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.cached, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
}

func (o oaWire) toolPrefix() string { return "call_mock" }

func (o oaWire) body(x *exchange, a *answer) []byte {
	x.w.Header().Set("x-request-id", "req_mock"+x.id)
	var choices []any
	for i, c := range append([]*answer{a}, a.others...) {
		msg := map[string]any{"role": "assistant", "content": c.text, "refusal": nil}
		if c.tool != nil {
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": c.tool.id, "type": "function",
				"function": map[string]any{"name": c.tool.name, "arguments": c.tool.args}}}
		}
		choice := map[string]any{"index": i, "message": msg, "finish_reason": c.finish, "logprobs": nil}
		if o.azure {
			choice["content_filter_results"] = oaFilterOK
		}
		choices = append(choices, choice)
	}
	out := map[string]any{"id": "chatcmpl-mock" + x.id, "object": "chat.completion", "created": time.Now().Unix(),
		"model": x.req.model, "system_fingerprint": "fp_mock", "choices": choices, "usage": oaUsage(a.usage)}
	if o.azure {
		out["prompt_filter_results"] = []any{map[string]any{"prompt_index": 0, "content_filter_results": oaFilterOK}}
	}
	b, _ := json.Marshal(out)
	return b
}

// oaStream writes a Chat Completions stream: one chunk per token, the
// finish reason in a last delta, an optional usage chunk, then [DONE].
type oaStream struct {
	o       oaWire
	x       *exchange
	created int64
	calls   bool
	// n is how many choices the stream carries; idx the choice the
	// frames from now on belong to (choicer).
	n, idx int
}

func (s *oaStream) choices(n int) { s.n = n }
func (s *oaStream) choice(i int)  { s.idx = i }

func (o oaWire) streamer(x *exchange) streamer {
	return &oaStream{o: o, x: x, created: time.Now().Unix()}
}

func (s *oaStream) header(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("x-request-id", "req_mock"+s.x.id)
}

func (s *oaStream) chunk(choices []any, extra map[string]any) []byte {
	c := map[string]any{"id": "chatcmpl-mock" + s.x.id, "object": "chat.completion.chunk", "created": s.created,
		"model": s.x.req.model, "system_fingerprint": "fp_mock", "choices": choices}
	for k, v := range extra {
		c[k] = v
	}
	b, _ := json.Marshal(c)
	return append(append([]byte("data: "), b...), '\n', '\n')
}

func (s *oaStream) delta(delta map[string]any, finish any) []byte {
	ch := map[string]any{"index": s.idx, "delta": delta, "finish_reason": finish, "logprobs": nil}
	if s.o.azure {
		ch["content_filter_results"] = map[string]any{}
	}
	return s.chunk([]any{ch}, nil)
}

func (s *oaStream) start() []byte {
	var b []byte
	if s.o.azure {
		// Azure sends the prompt's filter results first, in a chunk
		// without choices, id or model.
		pf, _ := json.Marshal(map[string]any{"choices": []any{}, "created": 0, "id": "", "model": "", "object": "",
			"prompt_filter_results": []any{map[string]any{"prompt_index": 0, "content_filter_results": oaFilterOK}}})
		b = append(append(append(b, "data: "...), pf...), '\n', '\n')
	}
	for i := range max(1, s.n) {
		s.idx = i
		b = append(b, s.delta(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)...)
	}
	s.idx = 0
	return b
}

func (s *oaStream) text(p string) []byte {
	if s.x.logprobs {
		ch := map[string]any{"index": s.idx, "delta": map[string]any{"content": p}, "finish_reason": nil, "logprobs": Logprobs(p)}
		return s.chunk([]any{ch}, nil)
	}
	return s.delta(map[string]any{"content": p}, nil)
}

func (s *oaStream) toolStart(id, name string) []byte {
	s.calls = true
	return s.delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
		"function": map[string]any{"name": name, "arguments": ""}}}}, nil)
}

func (s *oaStream) toolArgs(p string, _ bool) []byte {
	return s.delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": p}}}}, nil)
}

func (s *oaStream) finish(finish string, u usage, terminate bool) []byte {
	var b []byte
	for i := range max(1, s.n) {
		s.idx = i
		b = append(b, s.delta(map[string]any{}, finish)...)
	}
	s.idx = 0
	if s.o.usage {
		b = append(b, s.chunk([]any{}, map[string]any{"usage": oaUsage(u)})...)
	}
	if terminate {
		b = append(b, "data: [DONE]\n\n"...)
	}
	return b
}

func (s *oaStream) malformed() []byte {
	return []byte("data: {\"id\":\"chatcmpl-broken\",\"choices\":[{\"delta\":{\"content\":\"garbage\n\n")
}

func (s *oaStream) fail(f *Fault) []byte {
	typ := orDefault(f.ErrorType, "overloaded_error")
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": orDefault(f.Message, "Overloaded"), "type": typ, "param": nil,
		"code": orDefault(f.ErrorCode, typ)}})
	return append(append([]byte("data: "), b...), '\n', '\n')
}

// badParam is a request OpenAI refuses for one parameter's value, with
// the parameter and a code in its error.
type badParam struct{ param, code, msg string }

func (b *badParam) Error() string { return b.msg }

// oaModelNotFound is OpenAI's message for a model it does not have.
func oaModelNotFound(model string) string {
	return "The model `" + model + "` does not exist or you do not have access to it."
}

// oaError writes an error in OpenAI's shape.
func oaError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}

// writeJSON writes v as a JSON body with a status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// retryHeaders sets a fault's Retry-After and retry-after-ms headers.
func retryHeaders(h http.Header, f *Fault) {
	if f.RetryAfter != "" {
		h.Set("Retry-After", f.RetryAfter)
	}
	if f.RetryAfterMS != "" {
		h.Set("retry-after-ms", f.RetryAfterMS)
	}
}

// oaCodec answers as OpenAI's Chat Completions API.
type oaCodec struct{ oaWire }

// serveOpenAI answers POST /v1/chat/completions.
func (m *Mock) serveOpenAI(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	a, in, err := decodeOpenAI(body)
	if err == nil && a.model == "" {
		err = refusal("you must provide a model parameter")
	}
	if bp, ok := err.(*badParam); ok {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": bp.msg, "type": "invalid_request_error", "param": bp.param, "code": bp.code}})
		return
	}
	if err != nil {
		oaError(w, 400, "invalid_request_error", "", err.Error())
		return
	}
	x := m.begin(oaCodec{oaWire{usage: in.StreamOptions != nil && in.StreamOptions.IncludeUsage}}, w, r, a)
	x.logprobs = in.Logprobs
	x.finishServe()
}

func (oaCodec) fail(x *exchange, f *Fault) {
	retryHeaders(x.w.Header(), f)
	status, typ, code, msg := f.Status, f.ErrorType, f.ErrorCode, f.Message
	switch f.Type {
	case FaultAuth:
		status, typ, code = 401, "invalid_request_error", "invalid_api_key"
		msg = orDefault(msg, "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.")
	case FaultContextLength:
		status, typ, code = 400, "invalid_request_error", "context_length_exceeded"
		msg = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."
	case FaultContentPolicy:
		status, typ, code = 400, "invalid_request_error", "content_policy_violation"
		msg = "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system."
	case FaultQuota:
		status, typ, code = 429, "insufficient_quota", "insufficient_quota"
		msg = "You exceeded your current quota, please check your plan and billing details."
	case FaultRejectPrefill:
		status, typ = 400, "invalid_request_error"
		msg = "This model does not support assistant message prefill. The conversation must end with a user message."
	case FaultModelNotFound:
		status, typ, code = 404, "invalid_request_error", "model_not_found"
		msg = orDefault(msg, oaModelNotFound(x.req.model))
	}
	status = orInt(status, 500)
	if typ == "" {
		switch {
		case status == 429:
			typ, code = "requests", "rate_limit_exceeded"
		case status >= 500:
			typ = "server_error"
		default:
			typ = "invalid_request_error"
		}
	}
	oaError(x.w, status, typ, code, orDefault(msg, anMessage(status)))
}
