package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// legacyCodec answers in a protocol through the product's own encoders
// (internal/provider): the OpenAI Chat Completions, Responses and
// embeddings and Anthropic Messages fakes until they have codecs of their
// own.
type legacyCodec struct{ proto provider.Protocol }

func (l legacyCodec) toolPrefix() string {
	if l.proto == provider.Anthropic {
		return "toolu_mock"
	}
	return "call_mock"
}

// askOf is what the mock needs of a parsed request.
func askOf(r *provider.Request, promptTokens int64) *ask {
	a := &ask{model: r.Model, system: r.System, stream: r.Stream, maxTokens: r.MaxTokens, thinking: r.Thinking, promptTokens: promptTokens}
	for i := range r.Messages {
		m := &r.Messages[i]
		t := turn{role: m.Role, text: m.Text(), hasCalls: len(m.ToolCalls) > 0}
		for _, c := range m.ToolCalls {
			t.calls += c.Name + c.Arguments
		}
		a.turns = append(a.turns, t)
	}
	for _, t := range r.Tools {
		a.tools = append(a.tools, t.Name)
	}
	if tc := r.ToolChoice; tc != nil {
		a.toolMode, a.toolName = tc.Mode, tc.Name
	}
	return a
}

// Answer returns the full text the mock answers for a request body's
// prompt with the given seed and length: the text a client must read,
// however many attempts it took.
func Answer(seed int64, r *provider.Request, n int) string {
	return strings.Join(answerTokens(promptKey(seed, askOf(r, 0)), n), "")
}

func (l legacyCodec) body(x *exchange, a *answer) []byte {
	x.w.Header().Set("x-request-id", "req_mock"+x.id)
	resp := &provider.Response{ID: "mock-" + x.id, Model: x.req.model, Created: time.Now().Unix(), Finish: a.finish, Text: a.text}
	if a.tool != nil {
		resp.ToolCalls = []provider.ToolCall{{ID: a.tool.id, Name: a.tool.name, Arguments: a.tool.args}}
	}
	resp.Usage = gwUsage(a.usage)
	id := "chatcmpl-mock" + x.id
	if l.proto == provider.Anthropic {
		id = "msg_mock" + x.id
	}
	return provider.EncodeResponse(l.proto, resp, id)
}

func gwUsage(u usage) gw.Usage {
	return gw.Usage{InputTokens: u.input, OutputTokens: u.output, CachedTokens: u.cached, CacheWriteTokens: u.cacheWrite}
}

// legacyStreamer streams through the product's encoders.
type legacyStreamer struct {
	x   *exchange
	l   legacyCodec
	enc provider.Encoder
}

func (l legacyCodec) streamer(x *exchange) streamer {
	id := "chatcmpl-mock" + x.id
	if l.proto == provider.Anthropic {
		id = "msg_mock" + x.id
	}
	enc := provider.NewEncoder(l.proto, id, time.Now().Unix(), x.req.model)
	if x.rs != nil {
		enc = provider.NewResponsesEncoder(x.rs.shell)
	}
	ls := &legacyStreamer{x: x, l: l, enc: enc}
	if te, ok := enc.(provider.ThinkingEncoder); ok && l.proto == provider.Anthropic {
		return &legacyThinker{ls, te}
	}
	return ls
}

// legacyThinker is an Anthropic stream, which can carry thinking.
type legacyThinker struct {
	*legacyStreamer
	te provider.ThinkingEncoder
}

func (s *legacyThinker) thinking(p string) []byte { return s.te.Thinking(nil, p) }

func (s *legacyThinker) signature(sig string) []byte { return s.te.Signature(nil, sig) }

func (s *legacyStreamer) header(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("x-request-id", "req_mock"+s.x.id)
}

func (s *legacyStreamer) start() []byte { return s.enc.Start(nil, s.x.prompt) }

func (s *legacyStreamer) text(p string) []byte {
	if s.x.logprobs {
		return s.enc.(provider.LogprobsEncoder).TextLogprobs(nil, p, Logprobs(p))
	}
	return s.enc.Text(nil, p)
}

func (s *legacyStreamer) toolStart(id, name string) []byte { return s.enc.ToolStart(nil, 0, id, name) }

func (s *legacyStreamer) toolArgs(p string, _ bool) []byte { return s.enc.ToolArgs(nil, 0, p) }

func (s *legacyStreamer) finish(finish string, u usage, terminate bool) []byte {
	tail := s.enc.Finish(nil, finish, gwUsage(u), true)
	if !terminate {
		tail = tail[:len(tail)-len(terminator(s.l.proto))]
	}
	return tail
}

func (s *legacyStreamer) malformed() []byte {
	return sse.AppendEvent(nil, eventType(s.l.proto), []byte(`{"id":"chatcmpl-broken","choices":[{"delta":{"content":"garbage`))
}

func (s *legacyStreamer) fail(*Fault) []byte {
	return s.enc.Error(nil, &provider.ClientError{Type: "overloaded_error", Code: "overloaded_error", Message: "Overloaded"})
}

func eventType(p provider.Protocol) string {
	if p == provider.Anthropic {
		return "content_block_delta"
	}
	return ""
}

// terminator is the final frame a no_done fault leaves out.
func terminator(p provider.Protocol) string {
	if p == provider.Anthropic {
		return "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	}
	return "data: [DONE]\n\n"
}

// errorResponse writes the provider's error for a status fault.
func (l legacyCodec) fail(x *exchange, f *Fault) {
	status, typ, code, msg := f.Status, f.ErrorType, f.ErrorCode, f.Message
	switch f.Type {
	case FaultContextLength:
		status, code = 400, "context_length_exceeded"
		typ, msg = "invalid_request_error", "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."
		if l.proto == provider.Anthropic {
			msg = "prompt is too long: 210000 tokens > 200000 maximum"
		}
	case FaultContentPolicy:
		status, typ, code = 400, "invalid_request_error", "content_policy_violation"
		msg = "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system."
		if l.proto == provider.Anthropic {
			msg = "Output blocked by content filtering policy"
		}
	case FaultQuota:
		status, typ, code = 429, "insufficient_quota", "insufficient_quota"
		msg = "You exceeded your current quota, please check your plan and billing details."
	case FaultRejectPrefill:
		status, typ = 400, "invalid_request_error"
		msg = "This model does not support assistant message prefill. The conversation must end with a user message."
	case FaultModelNotFound:
		status, typ, code = 404, "invalid_request_error", "model_not_found"
		msg = orDefault(msg, oaModelNotFound(x.req.model))
		if l.proto == provider.Anthropic {
			typ, msg = "not_found_error", orDefault(f.Message, "model: "+x.req.model)
		}
	}
	if status == 0 {
		status = 500
	}
	if typ == "" {
		typ, code = defaultErrorType(l.proto, status)
	}
	if msg == "" {
		msg = http.StatusText(status)
		if status == 529 {
			msg = "Overloaded"
		}
	}
	h := http.Header{}
	if f.RetryAfter != "" {
		h.Set("Retry-After", f.RetryAfter)
	}
	if f.RetryAfterMS != "" {
		h.Set("retry-after-ms", f.RetryAfterMS)
	}
	writeError(x.w, l.proto, status, typ, code, msg, h)
}

// defaultErrorType names the error each provider sends for a status.
func defaultErrorType(p provider.Protocol, status int) (typ, code string) {
	if p == provider.Anthropic {
		switch status {
		case 429:
			return "rate_limit_error", ""
		case 529:
			return "overloaded_error", ""
		case 401:
			return "authentication_error", ""
		case 404:
			return "not_found_error", ""
		}
		if status >= 500 {
			return "api_error", ""
		}
		return "invalid_request_error", ""
	}
	switch {
	case status == 429:
		return "requests", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

func writeError(w http.ResponseWriter, p provider.Protocol, status int, typ, code, msg string, h http.Header) {
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	var body any
	if p == provider.Anthropic {
		body = map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}, "request_id": "req_mock"}
	} else {
		var c any
		if code != "" {
			c = code
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
