package mock

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// This file is the mock's own writing of the OpenAI Responses API's
// response objects and stream events (platform.openai.com/docs/api-reference/responses
// and /responses-streaming), independent of internal/provider.

// rsObject is a response object on the wire; what the request set is
// echoed, the rest is the API's defaults.
type rsObject struct {
	ID                 string           `json:"id"`
	Object             string           `json:"object"`
	AccessPrograms     rsAccess         `json:"access_programs"`
	CreatedAt          int64            `json:"created_at"`
	Status             string           `json:"status"`
	Background         bool             `json:"background"`
	CompletedAt        *int64           `json:"completed_at"`
	Conversation       *rsRef           `json:"conversation"`
	Error              *rsError         `json:"error"`
	IncompleteDetails  *rsIncomplete    `json:"incomplete_details"`
	Instructions       *string          `json:"instructions"`
	MaxOutputTokens    *int64           `json:"max_output_tokens"`
	MaxToolCalls       *int64           `json:"max_tool_calls"`
	Metadata           json.RawMessage  `json:"metadata"`
	Model              string           `json:"model"`
	Output             []map[string]any `json:"output"`
	ParallelToolCalls  bool             `json:"parallel_tool_calls"`
	PreviousResponseID *string          `json:"previous_response_id"`
	PromptCacheKey     *string          `json:"prompt_cache_key"`
	Reasoning          json.RawMessage  `json:"reasoning"`
	SafetyIdentifier   *string          `json:"safety_identifier"`
	ServiceTier        string           `json:"service_tier"`
	Store              bool             `json:"store"`
	Temperature        float64          `json:"temperature"`
	Text               json.RawMessage  `json:"text"`
	ToolChoice         json.RawMessage  `json:"tool_choice"`
	Tools              json.RawMessage  `json:"tools"`
	TopLogprobs        int              `json:"top_logprobs"`
	TopP               float64          `json:"top_p"`
	Truncation         string           `json:"truncation"`
	Usage              map[string]any   `json:"usage"`
	User               *string          `json:"user"`
}

// rsAccess is the access program a response ran under: the standard one.
type rsAccess struct {
	Cyber string `json:"cyber"`
}

type rsRef struct {
	ID string `json:"id"`
}

type rsError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type rsIncomplete struct {
	Reason string `json:"reason"`
}

// stored reports whether the response is kept (store defaults to true).
func (t *rsTurn) stored() bool { return t.req.Store == nil || *t.req.Store }

// object is the turn's response object (id, with a copy's suffix) in a
// status, with its output and usage (nil: none yet).
func (t *rsTurn) object(id, status string, output []Item, u *usage, completedAt int64) *rsObject {
	r := &t.req
	o := &rsObject{ID: id, Object: "response", AccessPrograms: rsAccess{Cyber: "standard"}, CreatedAt: t.created, Status: status,
		Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Metadata: orRaw(r.Metadata, `{}`), Model: r.Model,
		Output: []map[string]any{}, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		PromptCacheKey: r.PromptCacheKey, Reasoning: orRaw(r.Reasoning, `{"effort":null,"summary":null}`),
		SafetyIdentifier: r.SafetyIdentifier, ServiceTier: "default", Store: t.stored(), Temperature: 1,
		Text: orRaw(r.Text, `{"format":{"type":"text"}}`), ToolChoice: orRaw(r.ToolChoice, `"auto"`), Tools: orRaw(r.Tools, `[]`),
		TopP: 1, Truncation: "disabled", User: r.User}
	if r.Temperature != nil {
		o.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		o.TopP = *r.TopP
	}
	if r.PreviousResponseID != "" {
		prev := r.PreviousResponseID
		o.PreviousResponseID = &prev
	}
	if t.conv != "" {
		o.Conversation = &rsRef{ID: t.conv}
	}
	for i := range output {
		o.Output = append(o.Output, output[i].wire("completed"))
	}
	if u != nil {
		o.Usage = rsUsage(*u)
	}
	if status == "completed" {
		o.CompletedAt = &completedAt
	}
	return o
}

// finished is the turn's response object once its answer is whole:
// completed, or incomplete when max_output_tokens cut it short.
func (t *rsTurn) finished(id string, output []Item, a *answer) []byte {
	status := "completed"
	if a.finish == finishLength {
		status = "incomplete"
	}
	o := t.object(id, status, output, &a.usage, time.Now().Unix())
	if status == "incomplete" {
		o.IncompleteDetails = &rsIncomplete{Reason: "max_output_tokens"}
	}
	b, _ := json.Marshal(o)
	return b
}

func orRaw(raw json.RawMessage, def string) json.RawMessage {
	if isSet(raw) {
		return raw
	}
	return json.RawMessage(def)
}

// rsUsage is a response's usage: input_tokens counts the cache's reads
// and writes too, which its details name.
func rsUsage(u usage) map[string]any {
	return map[string]any{"input_tokens": u.input, "output_tokens": u.output, "total_tokens": u.input + u.output,
		"input_tokens_details":  map[string]any{"cached_tokens": u.cached, "cache_write_tokens": u.cacheWrite},
		"output_tokens_details": map[string]any{"reasoning_tokens": 0}}
}

// rsItemID names output item index of a response (resp: the exchange's
// id and a copy's suffix): the same in its stream and its stored object.
func rsItemID(kind, resp string, index int) string {
	return kind + "_mock" + resp + "_" + strconv.Itoa(index)
}

// outputItems is what an answer's output holds: its message, or its
// function call.
func outputItems(resp string, a *answer) []Item {
	if a.tool != nil {
		return []Item{{ID: rsItemID("fc", resp, 0), Type: itemCall, CallID: a.tool.id, Name: a.tool.name, Arguments: a.tool.args}}
	}
	return []Item{{ID: rsItemID("msg", resp, 0), Type: itemMessage, Role: roleAssistant, Parts: []Part{{Type: "output_text", Text: a.text}}}}
}

// rsCodec answers as the OpenAI Responses API.
type rsCodec struct{}

func (rsCodec) toolPrefix() string { return "call_mock" }

// body commits the answer and writes its response object.
func (rsCodec) body(x *exchange, a *answer) []byte {
	x.w.Header().Set("x-request-id", "req_mock"+x.id)
	return x.commit(a, "", true)
}

// fail writes OpenAI's error body: the Responses API shares it.
func (rsCodec) fail(x *exchange, f *Fault) { oaCodec{}.fail(x, f) }

// rsStream writes the Responses event sequence: response.created and
// response.in_progress; per output item output_item.added, its content
// part or arguments with their deltas and done events, output_item.done;
// then response.completed (or response.incomplete). Every event carries
// its sequence_number.
type rsStream struct {
	x      *exchange
	seq    int
	output []Item
	open   bool // the last output item is still being written
}

func (rsCodec) streamer(x *exchange) streamer { return &rsStream{x: x} }

func (s *rsStream) header(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("x-request-id", "req_mock"+s.x.id)
}

func (s *rsStream) event(typ string, v map[string]any) []byte {
	v["type"], v["sequence_number"] = typ, s.seq
	s.seq++
	b, _ := json.Marshal(v)
	return []byte("event: " + typ + "\ndata: " + string(b) + "\n\n")
}

func (s *rsStream) start() []byte {
	o := s.x.rs.object(s.x.rs.id, "in_progress", nil, nil, 0)
	b := s.event("response.created", map[string]any{"response": o})
	return append(b, s.event("response.in_progress", map[string]any{"response": o})...)
}

// add opens an output item with output_item.added.
func (s *rsStream) add(it Item) []byte {
	b := s.close()
	s.output = append(s.output, it)
	s.open = true
	return append(b, s.event("response.output_item.added", map[string]any{"output_index": len(s.output) - 1, "item": it.wire("in_progress")})...)
}

// last is the open item and its index.
func (s *rsStream) last() (*Item, int) { i := len(s.output) - 1; return &s.output[i], i }

func (s *rsStream) openMessage() []byte {
	if s.open && s.output[len(s.output)-1].Type == itemMessage {
		return nil
	}
	b := s.add(Item{ID: rsItemID("msg", s.x.id, len(s.output)), Type: itemMessage, Role: roleAssistant})
	it, i := s.last()
	it.Parts = []Part{{Type: "output_text"}}
	return append(b, s.event("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0,
		"part": it.Parts[0].wire()})...)
}

func (s *rsStream) text(p string) []byte {
	b := s.openMessage()
	it, i := s.last()
	it.Parts[0].Text += p
	return append(b, s.event("response.output_text.delta", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0,
		"delta": p, "logprobs": []any{}})...)
}

func (s *rsStream) toolStart(id, name string) []byte {
	return s.add(Item{ID: rsItemID("fc", s.x.id, len(s.output)), Type: itemCall, CallID: id, Name: name})
}

func (s *rsStream) toolArgs(p string, _ bool) []byte {
	it, i := s.last()
	it.Arguments += p
	return s.event("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": i, "delta": p})
}

// close ends the open item with its done events.
func (s *rsStream) close() []byte {
	if !s.open {
		return nil
	}
	s.open = false
	it, i := s.last()
	var b []byte
	switch it.Type {
	case itemMessage:
		b = s.event("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0,
			"text": it.Parts[0].Text, "logprobs": []any{}})
		b = append(b, s.event("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0,
			"part": it.Parts[0].wire()})...)
	case itemCall:
		b = s.event("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i, "arguments": it.Arguments})
	}
	return append(b, s.event("response.output_item.done", map[string]any{"output_index": i, "item": it.wire("completed")})...)
}

// finish closes the output, commits the response and ends the stream with
// it; without terminate (the no_done fault) the stream stops before
// response.completed.
func (s *rsStream) finish(finish string, u usage, terminate bool) []byte {
	var b []byte
	if len(s.output) == 0 {
		b = s.openMessage() // an empty answer is still one message
	}
	b = append(b, s.close()...)
	a := &answer{finish: finish, usage: u}
	for _, it := range s.output {
		if it.Type == itemCall {
			a.tool = &toolCall{id: it.CallID, name: it.Name, args: it.Arguments}
		} else {
			a.text += it.Text()
		}
	}
	object := s.x.commit(a, "", true)
	if !terminate {
		return b
	}
	typ := "response.completed"
	if finish == finishLength {
		typ = "response.incomplete"
	}
	return append(b, s.event(typ, map[string]any{"response": json.RawMessage(object)})...)
}

func (s *rsStream) malformed() []byte {
	return []byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"garbage\n\n")
}

// fail is the API's error event, then response.failed with the error.
func (s *rsStream) fail(f *Fault) []byte {
	code := orDefault(f.ErrorCode, orDefault(f.ErrorType, "server_error"))
	msg := orDefault(f.Message, "The server had an error while processing your request. Sorry about that!")
	b := s.event("error", map[string]any{"code": code, "message": msg, "param": nil})
	o := s.x.rs.object(s.x.rs.id, "failed", nil, nil, 0)
	o.Error = &rsError{Code: code, Message: msg}
	return append(b, s.event("response.failed", map[string]any{"response": o})...)
}
