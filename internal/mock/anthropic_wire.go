package mock

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// This file is the mock's own reading and writing of the Anthropic
// Messages wire format (docs.anthropic.com/en/api/messages and
// /en/docs/build-with-claude/streaming), independent of internal/provider.

// anRequest is the part of a Messages request the mock reads.
type anRequest struct {
	Model            string          `json:"model"`
	AnthropicVersion string          `json:"anthropic_version"`
	System           json.RawMessage `json:"system"`
	Messages         []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens int64 `json:"max_tokens"`
	Stream    bool  `json:"stream"`
	Tools     []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

// anText reads a field that is a string or an array of text blocks, the
// blocks' text joined with sep.
func anText(raw json.RawMessage, sep string) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = b.Text
	}
	return strings.Join(parts, sep)
}

// anTurns reads one message: a user message's tool_result blocks become
// tool turns of their own, ahead of what else it says. n is its size in
// the mock's count.
func anTurns(role string, raw json.RawMessage) (turns []turn, n int64) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []turn{{role: role, text: s}}, perMessage + textTokens(s)
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &blocks)
	cur := turn{role: role}
	var size int64
	parts := 0
	for _, b := range blocks {
		switch b.Type {
		case "text":
			cur.text += b.Text
			size += textTokens(b.Text)
			parts++
		case "image", "document":
			size += perImage
			parts++
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			cur.calls += b.Name + args
			cur.hasCalls = true
			size += textTokens(b.Name) + textTokens(args)
		case "tool_result":
			t := anText(b.Content, "")
			turns = append(turns, turn{role: roleTool, text: t})
			n += perMessage + textTokens(t)
		}
	}
	if parts > 0 || cur.hasCalls || len(turns) == 0 {
		turns = append(turns, cur)
		n += perMessage + size
	}
	return turns, n
}

// decodeAnthropic reads a Messages request; an error is the message of
// a 400 invalid_request_error. The prompt is counted as for OpenAI
// (docs/mock.md).
func decodeAnthropic(body []byte) (*ask, *anRequest, error) {
	return decodeAnthropicPrompt(body, true)
}

// decodeAnthropicPrompt reads a Messages or count_tokens request (which
// has no max_tokens).
func decodeAnthropicPrompt(body []byte, generate bool) (*ask, *anRequest, error) {
	var in anRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, fmt.Errorf("invalid request: %w", err)
	}
	if generate && in.MaxTokens <= 0 {
		return nil, nil, refusal("max_tokens: Field required")
	}
	if len(in.Messages) == 0 {
		return nil, nil, refusal("messages: at least one message is required")
	}
	a := &ask{model: in.Model, stream: in.Stream, maxTokens: in.MaxTokens}
	a.system = anText(in.System, "\n\n")
	n := int64(perRequest)
	if a.system != "" {
		n += perMessage + textTokens(a.system)
	}
	for _, m := range in.Messages {
		ts, size := anTurns(m.Role, m.Content)
		a.turns = append(a.turns, ts...)
		n += size
	}
	for _, t := range in.Tools {
		a.tools = append(a.tools, t.Name)
		n += textTokens(t.Name) + textTokens(t.Description) + textTokens(string(t.InputSchema))
	}
	a.promptTokens = n
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "none":
			a.toolMode = "none"
		case "any":
			a.toolMode = "required"
		case "tool":
			a.toolMode, a.toolName = "tool", tc.Name
		}
	}
	a.thinking = in.Thinking != nil && in.Thinking.Type != "" && in.Thinking.Type != "disabled"
	return a, &in, nil
}

// anWire writes Messages answers.
type anWire struct{}

func (anWire) toolPrefix() string { return "toolu_mock" }

func anStop(finish string) string {
	switch finish {
	case finishLength:
		return "max_tokens"
	case finishTools:
		return "tool_use"
	}
	return "end_turn"
}

func anUsage(u usage) map[string]any {
	return map[string]any{"input_tokens": u.input - u.cached - u.cacheWrite, "output_tokens": u.output,
		"cache_read_input_tokens": u.cached, "cache_creation_input_tokens": u.cacheWrite}
}

func (anWire) body(x *exchange, a *answer) []byte {
	x.w.Header().Set("request-id", "req_mock"+x.id)
	var content []any
	if a.tool != nil {
		content = append(content, map[string]any{"type": "tool_use", "id": a.tool.id, "name": a.tool.name, "input": json.RawMessage(a.tool.args)})
	} else {
		content = append(content, map[string]any{"type": "text", "text": a.text})
	}
	b, _ := json.Marshal(map[string]any{"id": "msg_mock" + x.id, "type": "message", "role": "assistant", "model": x.req.model,
		"content": content, "stop_reason": anStop(a.finish), "stop_sequence": nil, "usage": anUsage(a.usage)})
	return b
}

// anStream writes the Messages event sequence: message_start, a content
// block per part (start, deltas, stop), message_delta, message_stop.
type anStream struct {
	x     *exchange
	index int
	open  string // the type of the open block, "" if none
}

func (anWire) streamer(x *exchange) streamer { return &anStream{x: x, index: -1} }

func (s *anStream) header(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("request-id", "req_mock"+s.x.id)
}

func anEvent(typ string, v map[string]any) []byte {
	v["type"] = typ
	b, _ := json.Marshal(v)
	return []byte("event: " + typ + "\ndata: " + string(b) + "\n\n")
}

func (s *anStream) start() []byte {
	u := anUsage(s.x.usage(1))
	b := anEvent("message_start", map[string]any{"message": map[string]any{"id": "msg_mock" + s.x.id, "type": "message", "role": "assistant",
		"model": s.x.req.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": u}})
	return append(b, anEvent("ping", map[string]any{})...)
}

// block closes the open block unless it is of typ, and opens one of typ
// with its start.
func (s *anStream) block(typ string, start map[string]any) []byte {
	if s.open == typ {
		return nil
	}
	b := s.close()
	s.index++
	s.open = typ
	return append(b, anEvent("content_block_start", map[string]any{"index": s.index, "content_block": start})...)
}

func (s *anStream) close() []byte {
	if s.open == "" {
		return nil
	}
	s.open = ""
	return anEvent("content_block_stop", map[string]any{"index": s.index})
}

func (s *anStream) delta(d map[string]any) []byte {
	return anEvent("content_block_delta", map[string]any{"index": s.index, "delta": d})
}

func (s *anStream) text(p string) []byte {
	b := s.block("text", map[string]any{"type": "text", "text": ""})
	return append(b, s.delta(map[string]any{"type": "text_delta", "text": p})...)
}

func (s *anStream) thinking(p string) []byte {
	b := s.block("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""})
	return append(b, s.delta(map[string]any{"type": "thinking_delta", "thinking": p})...)
}

func (s *anStream) signature(sig string) []byte {
	b := s.delta(map[string]any{"type": "signature_delta", "signature": sig})
	return append(b, s.close()...)
}

func (s *anStream) toolStart(id, name string) []byte {
	return s.block("tool_use", map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}})
}

func (s *anStream) toolArgs(p string, _ bool) []byte {
	return s.delta(map[string]any{"type": "input_json_delta", "partial_json": p})
}

func (s *anStream) finish(finish string, u usage, terminate bool) []byte {
	b := s.close()
	mu := anUsage(u)
	b = append(b, anEvent("message_delta", map[string]any{"delta": map[string]any{"stop_reason": anStop(finish), "stop_sequence": nil}, "usage": mu})...)
	if terminate {
		b = append(b, anEvent("message_stop", map[string]any{})...)
	}
	return b
}

func (s *anStream) malformed() []byte {
	return []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"garbage\n\n")
}

func (s *anStream) fail(f *Fault) []byte {
	typ, msg := orDefault(f.ErrorType, "overloaded_error"), orDefault(f.Message, "Overloaded")
	return anEvent("error", map[string]any{"error": map[string]any{"type": typ, "message": msg}})
}

// anError writes an error in Anthropic's shape.
func anError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_mock"})
}

// anErrorType names Anthropic's error type for a status.
func anErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

// anCodec answers as Anthropic's Messages API.
type anCodec struct{ anWire }

// serveAnthropic answers POST /v1/messages.
func (m *Mock) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	a, in, err := decodeAnthropic(body)
	if err == nil && in.Model == "" {
		err = refusal("model: Field required")
	}
	if err != nil {
		anError(w, 400, "invalid_request_error", err.Error())
		return
	}
	if a.thinking && a.continuation() {
		anError(w, 400, "invalid_request_error", "assistant message prefill is not supported when thinking is enabled")
		return
	}
	x := m.begin(anCodec{}, w, r, a)
	x.finishServe()
}

func (anCodec) fail(x *exchange, f *Fault) {
	retryHeaders(x.w.Header(), f)
	status, typ, msg := f.Status, f.ErrorType, f.Message
	switch f.Type {
	case FaultAuth:
		status, typ, msg = 401, "authentication_error", orDefault(msg, "invalid x-api-key")
	case FaultContextLength:
		status, typ, msg = 400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
	case FaultContentPolicy:
		status, typ, msg = 400, "invalid_request_error", "Output blocked by content filtering policy"
	case FaultQuota:
		status, typ, msg = 429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."
	case FaultRejectPrefill:
		status, typ, msg = 400, "invalid_request_error", "This model does not support assistant message prefill. The conversation must end with a user message."
	case FaultModelNotFound:
		status, typ, msg = 404, "not_found_error", orDefault(msg, "model: "+x.req.model)
	}
	status = orInt(status, 500)
	anError(x.w, status, orDefault(typ, anErrorType(status)), orDefault(msg, anMessage(status)))
}
