package provider

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// Responses is the OpenAI Responses API as the gateway serves it: a
// client protocol only. Its requests carry one turn of a conversation the
// gateway stores (docs/conversations.md); the history is read from the
// turn ledger and the whole conversation goes to whichever route serves
// the turn.
const Responses Protocol = "responses"

// ResponsesRequest is a parsed POST /v1/responses body.
type ResponsesRequest struct {
	Model              string
	Input              []Item
	Instructions       *string
	PreviousResponseID string
	Store              bool
	Stream             bool
	MaxOutputTokens    int64
	Temperature        *float64
	TopP               *float64
	ParallelToolCalls  *bool
	User               string
	Tools              []Tool
	ToolChoice         *ToolChoice
	// ToolsRaw, ToolChoiceRaw and Metadata are echoed in the response
	// object as the client sent them.
	ToolsRaw      json.RawMessage
	ToolChoiceRaw json.RawMessage
	Metadata      json.RawMessage
	// Conversation is an upstream conversation object's id: what the
	// gateway sends a stateful route, and refuses from a client.
	Conversation string
}

// Item is one item of a conversation, in the Responses wire form the
// gateway stores and lists: a message, a function call or a function
// call's output.
type Item struct {
	ID        string     `json:"id,omitempty"`
	Type      string     `json:"type"`
	Status    string     `json:"status,omitempty"`
	Role      string     `json:"role,omitempty"`
	Content   []ItemPart `json:"content,omitempty"`
	CallID    string     `json:"call_id,omitempty"`
	Name      string     `json:"name,omitempty"`
	Arguments *string    `json:"arguments,omitempty"`
	Output    *string    `json:"output,omitempty"`
}

// MarshalJSON writes an item as the Responses API does: a message always
// has its content array (empty while it is being streamed), other items
// none.
func (it Item) MarshalJSON() ([]byte, error) {
	type plain Item
	if it.Type != ItemMessage || len(it.Content) > 0 {
		return json.Marshal(plain(it))
	}
	return json.Marshal(struct {
		plain
		Content []ItemPart `json:"content"`
	}{plain(it), []ItemPart{}})
}

// ItemPart is a piece of a message item's content: input_text,
// input_image, output_text or refusal.
type ItemPart struct {
	Type        string           `json:"type"`
	Text        *string          `json:"text,omitempty"`
	Refusal     *string          `json:"refusal,omitempty"`
	ImageURL    string           `json:"image_url,omitempty"`
	Detail      string           `json:"detail,omitempty"`
	Annotations *json.RawMessage `json:"annotations,omitempty"`
	Logprobs    *json.RawMessage `json:"logprobs,omitempty"`
}

// Item types.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
)

// rqBody is the wire form of a Responses request.
type rqBody struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	User               string          `json:"user"`
	SafetyIdentifier   string          `json:"safety_identifier"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Metadata           json.RawMessage `json:"metadata"`
	// Fields oncegate cannot honour on a gateway-held conversation.
	Background   *bool           `json:"background"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
	Text         *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	Reasoning json.RawMessage `json:"reasoning"`
}

// ParseResponsesRequest reads a POST /v1/responses body. A malformed or
// unsupported request is an *InvalidRequestError naming the field.
func ParseResponsesRequest(body []byte) (*ResponsesRequest, error) {
	var in rqBody
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("", "request body is not a valid response request: %v", jsonErr(err))
	}
	switch {
	case in.Model == "":
		return nil, invalid("model", "model is required")
	case in.Background != nil && *in.Background:
		return nil, invalid("background", "background responses are not supported: oncegate answers each turn while the client waits")
	case isSet(in.Prompt):
		return nil, invalid("prompt", "stored prompt templates are not supported")
	case in.Text != nil && in.Text.Format != nil && in.Text.Format.Type != "" && in.Text.Format.Type != "text":
		return nil, invalid("text.format", "only text output is supported on /v1/responses (found %q)", in.Text.Format.Type)
	case in.MaxOutputTokens != nil && *in.MaxOutputTokens < 1:
		return nil, invalid("max_output_tokens", "must be at least 1")
	}
	conv, err := conversationID(in.Conversation)
	if err != nil {
		return nil, err
	}
	r := &ResponsesRequest{Model: in.Model, Conversation: conv, Instructions: in.Instructions, Stream: in.Stream, Temperature: in.Temperature,
		TopP: in.TopP, ParallelToolCalls: in.ParallelToolCalls, User: in.User, Store: in.Store == nil || *in.Store}
	if in.SafetyIdentifier != "" {
		r.User = in.SafetyIdentifier
	}
	if in.PreviousResponseID != nil {
		r.PreviousResponseID = *in.PreviousResponseID
		if r.PreviousResponseID == "" {
			return nil, invalid("previous_response_id", "must not be empty")
		}
	}
	if in.MaxOutputTokens != nil {
		r.MaxOutputTokens = *in.MaxOutputTokens
	}
	if isSet(in.Metadata) {
		var m map[string]string
		if err := json.Unmarshal(in.Metadata, &m); err != nil {
			return nil, invalid("metadata", "metadata must be an object of strings: %v", jsonErr(err))
		}
		if len(m) > 16 {
			return nil, invalid("metadata", "at most 16 metadata keys, found %d", len(m))
		}
		r.Metadata = in.Metadata
	}
	if r.Input, err = parseInput(in.Input); err != nil {
		return nil, err
	}
	if isSet(in.Tools) {
		var tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(in.Tools, &tools); err != nil {
			return nil, invalid("tools", "tools must be an array of tool objects: %v", jsonErr(err))
		}
		for i, t := range tools {
			if t.Type != "function" || t.Name == "" {
				return nil, invalid(fmt.Sprintf("tools[%d]", i), "only function tools with a name are supported (found type %q)", t.Type)
			}
			r.Tools = append(r.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
		r.ToolsRaw = in.Tools
	}
	if isSet(in.ToolChoice) {
		if r.ToolChoice, err = rsToolChoice(in.ToolChoice); err != nil {
			return nil, err
		}
		r.ToolChoiceRaw = in.ToolChoice
	}
	return r, nil
}

// conversationID reads "conversation": an id, or {"id": …}.
func conversationID(raw json.RawMessage) (string, error) {
	if !isSet(raw) {
		return "", nil
	}
	var id string
	if json.Unmarshal(raw, &id) == nil && id != "" {
		return id, nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &o) == nil && o.ID != "" {
		return o.ID, nil
	}
	return "", invalid("conversation", "conversation must be an id or {\"id\": …}")
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// ParseInput reads input items: a string (one user message) or a list of
// items and messages, as POST /v1/responses and POST /v1/conversations
// take them.
func ParseInput(raw json.RawMessage) ([]Item, error) { return parseInput(raw) }

// parseInput reads input: a string (one user message) or a list of items
// and messages.
func parseInput(raw json.RawMessage) ([]Item, error) {
	if !isSet(raw) {
		return nil, invalid("input", "input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Item{userText(s)}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("input", "input must be a string or an array of items")
	}
	if len(list) == 0 {
		return nil, invalid("input", "input must not be empty")
	}
	items := make([]Item, 0, len(list))
	for i, one := range list {
		it, err := parseItem(one, fmt.Sprintf("input[%d]", i))
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func userText(s string) Item {
	return Item{Type: ItemMessage, Role: RoleUser, Content: []ItemPart{{Type: "input_text", Text: &s}}}
}

func parseItem(raw json.RawMessage, param string) (Item, error) {
	var in struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments *string         `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return Item{}, invalid(param, "not an input item: %v", jsonErr(err))
	}
	if in.Type == "" && in.Role != "" {
		in.Type = ItemMessage
	}
	switch in.Type {
	case ItemMessage:
		return parseMessageItem(in.Role, in.Content, param)
	case ItemFunctionCall:
		if in.CallID == "" || in.Name == "" {
			return Item{}, invalid(param, "a function_call item needs call_id and name")
		}
		args := ""
		if in.Arguments != nil {
			args = *in.Arguments
		}
		return Item{Type: ItemFunctionCall, CallID: in.CallID, Name: in.Name, Arguments: &args, Status: "completed"}, nil
	case ItemFunctionCallOutput:
		if in.CallID == "" {
			return Item{}, invalid(param+".call_id", "a function_call_output item needs call_id")
		}
		var out string
		if err := json.Unmarshal(in.Output, &out); err != nil {
			// Structured output (a list of content parts): keep its text.
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(in.Output, &parts) != nil {
				return Item{}, invalid(param+".output", "output must be a string or a list of text parts")
			}
			for _, p := range parts {
				out += p.Text
			}
		}
		return Item{Type: ItemFunctionCallOutput, CallID: in.CallID, Output: &out, Status: "completed"}, nil
	}
	return Item{}, invalid(param+".type", "unsupported input item type %q (supported: message, function_call, function_call_output)", in.Type)
}

func parseMessageItem(role string, content json.RawMessage, param string) (Item, error) {
	switch role {
	case RoleUser, RoleAssistant, "system", "developer":
	default:
		return Item{}, invalid(param+".role", "unknown role %q", role)
	}
	it := Item{Type: ItemMessage, Role: role, Status: "completed"}
	var s string
	if json.Unmarshal(content, &s) == nil {
		typ := "input_text"
		if role == RoleAssistant {
			typ = "output_text"
		}
		it.Content = []ItemPart{{Type: typ, Text: &s}}
		return it, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     *string         `json:"text"`
		Refusal  *string         `json:"refusal"`
		ImageURL json.RawMessage `json:"image_url"`
		Detail   string          `json:"detail"`
	}
	if err := json.Unmarshal(content, &parts); err != nil {
		return Item{}, invalid(param+".content", "content must be a string or an array of content parts")
	}
	for j, p := range parts {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		switch p.Type {
		case "input_text", "output_text":
			if p.Text == nil {
				return Item{}, invalid(pp+".text", "a text part needs text")
			}
			it.Content = append(it.Content, ItemPart{Type: p.Type, Text: p.Text})
		case "refusal":
			it.Content = append(it.Content, ItemPart{Type: p.Type, Refusal: p.Refusal})
		case "input_image":
			var url string
			if json.Unmarshal(p.ImageURL, &url) != nil || url == "" {
				return Item{}, invalid(pp+".image_url", "an input_image part needs image_url (file ids are not supported)")
			}
			it.Content = append(it.Content, ItemPart{Type: p.Type, ImageURL: url, Detail: p.Detail})
		default:
			return Item{}, invalid(pp+".type", "unsupported content part type %q", p.Type)
		}
	}
	return it, nil
}

func rsToolChoice(raw json.RawMessage) (*ToolChoice, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case ToolAuto, ToolNone, ToolRequired:
			return &ToolChoice{Mode: s}, nil
		}
		return nil, invalid("tool_choice", "unknown tool_choice %q", s)
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &o) != nil || o.Type != "function" || o.Name == "" {
		return nil, invalid("tool_choice", "tool_choice must be auto, none, required or {\"type\":\"function\",\"name\":…}")
	}
	return &ToolChoice{Mode: ToolNamed, Name: o.Name}, nil
}

// ItemList is one page of a list of items, as the Responses API lists
// them: at most limit, with first_id, last_id and has_more.
func ItemList(items []Item, limit int) map[string]any {
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	first, last := "", ""
	if len(items) > 0 {
		first, last = items[0].ID, items[len(items)-1].ID
	}
	if items == nil {
		items = []Item{}
	}
	return map[string]any{"object": "list", "data": items, "first_id": first, "last_id": last, "has_more": more}
}

// ItemsToMessages turns conversation items into neutral messages: system
// and developer messages become the system prompt, function calls join
// the assistant message before them, and function call outputs become
// tool results.
func ItemsToMessages(items []Item) (system []string, msgs []Message) {
	for _, it := range items {
		switch it.Type {
		case ItemMessage:
			if it.Role == "system" || it.Role == "developer" {
				system = append(system, itemText(it))
				continue
			}
			m := Message{Role: it.Role}
			for _, p := range it.Content {
				switch {
				case p.Type == "input_image":
					m.Parts = append(m.Parts, imagePart(p.ImageURL, nil))
				case p.Text != nil:
					m.Parts = append(m.Parts, Part{Type: PartText, Text: *p.Text})
				case p.Refusal != nil:
					m.Parts = append(m.Parts, Part{Type: PartText, Text: *p.Refusal})
				}
			}
			msgs = append(msgs, m)
		case ItemFunctionCall:
			tc := ToolCall{ID: it.CallID, Name: it.Name}
			if it.Arguments != nil {
				tc.Arguments = *it.Arguments
			}
			if n := len(msgs); n > 0 && msgs[n-1].Role == RoleAssistant {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, tc)
				continue
			}
			msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: []ToolCall{tc}})
		case ItemFunctionCallOutput:
			out := ""
			if it.Output != nil {
				out = *it.Output
			}
			msgs = append(msgs, Message{Role: RoleTool, ToolCallID: it.CallID, Parts: []Part{{Type: PartText, Text: out}}})
		}
	}
	return system, msgs
}

func itemText(it Item) string {
	var b strings.Builder
	for _, p := range it.Content {
		if p.Text != nil {
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

// ResponseShell is what a response object says besides its output: the
// request's settings, echoed as the Responses API does.
type ResponseShell struct {
	ID                 string
	CreatedAt          int64
	Model              string
	Instructions       *string
	PreviousResponseID string
	Store              bool
	MaxOutputTokens    int64
	Temperature        *float64
	TopP               *float64
	ParallelToolCalls  bool
	User               string
	Tools              json.RawMessage
	ToolChoice         json.RawMessage
	Metadata           json.RawMessage
	// Now tells a stream's completed_at (Unix seconds); nil: created_at.
	Now func() int64
}

func (s *ResponseShell) now() int64 {
	if s.Now != nil {
		return s.Now()
	}
	return s.CreatedAt
}

// ShellOf echoes a request in a response shell.
func ShellOf(r *ResponsesRequest, id string, createdAt int64) ResponseShell {
	return ResponseShell{ID: id, CreatedAt: createdAt, Model: r.Model, Instructions: r.Instructions,
		PreviousResponseID: r.PreviousResponseID, Store: r.Store, MaxOutputTokens: r.MaxOutputTokens,
		Temperature: r.Temperature, TopP: r.TopP, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		User: r.User, Tools: r.ToolsRaw, ToolChoice: r.ToolChoiceRaw, Metadata: r.Metadata}
}

// rsObject is a response object on the wire.
type rsObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	CompletedAt        *int64          `json:"completed_at"`
	Error              *rsError        `json:"error"`
	IncompleteDetails  *rsIncomplete   `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []Item          `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Store              bool            `json:"store"`
	Temperature        float64         `json:"temperature"`
	Text               json.RawMessage `json:"text"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              json.RawMessage `json:"tools"`
	TopP               float64         `json:"top_p"`
	Truncation         string          `json:"truncation"`
	Usage              *rsUsage        `json:"usage"`
	User               *string         `json:"user"`
	Metadata           json.RawMessage `json:"metadata"`
}

type rsError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type rsIncomplete struct {
	Reason string `json:"reason"`
}

type rsUsage struct {
	InputTokens   int64            `json:"input_tokens"`
	InputDetails  map[string]int64 `json:"input_tokens_details"`
	OutputTokens  int64            `json:"output_tokens"`
	OutputDetails map[string]int64 `json:"output_tokens_details"`
	TotalTokens   int64            `json:"total_tokens"`
}

func rsUsageOf(u gw.Usage) *rsUsage {
	return &rsUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens,
		InputDetails: map[string]int64{"cached_tokens": u.CachedTokens}, OutputDetails: map[string]int64{"reasoning_tokens": 0}}
}

// object renders the shell with a status, output and usage.
func (s *ResponseShell) object(status string, output []Item, u *gw.Usage, finish string, completedAt int64) *rsObject {
	o := &rsObject{ID: s.ID, Object: "response", CreatedAt: s.CreatedAt, Status: status, Instructions: s.Instructions,
		Model: s.Model, Output: output, ParallelToolCalls: s.ParallelToolCalls, Reasoning: json.RawMessage(`{"effort":null,"summary":null}`),
		Store: s.Store, Temperature: 1, TopP: 1, Text: json.RawMessage(`{"format":{"type":"text"}}`), Truncation: "disabled",
		ToolChoice: s.ToolChoice, Tools: s.Tools, Metadata: s.Metadata}
	if o.Output == nil {
		o.Output = []Item{}
	}
	if s.Temperature != nil {
		o.Temperature = *s.Temperature
	}
	if s.TopP != nil {
		o.TopP = *s.TopP
	}
	if s.MaxOutputTokens > 0 {
		m := s.MaxOutputTokens
		o.MaxOutputTokens = &m
	}
	if s.PreviousResponseID != "" {
		p := s.PreviousResponseID
		o.PreviousResponseID = &p
	}
	if s.User != "" {
		user := s.User
		o.User = &user
	}
	if !isSet(o.ToolChoice) {
		o.ToolChoice = json.RawMessage(`"auto"`)
	}
	if !isSet(o.Tools) {
		o.Tools = json.RawMessage(`[]`)
	}
	if !isSet(o.Metadata) {
		o.Metadata = json.RawMessage(`{}`)
	}
	if u != nil {
		o.Usage = rsUsageOf(*u)
	}
	if completedAt > 0 {
		o.CompletedAt = &completedAt
	}
	switch finish {
	case FinishLength:
		o.Status, o.IncompleteDetails = "incomplete", &rsIncomplete{Reason: "max_output_tokens"}
	case FinishContentFilter:
		o.Status, o.IncompleteDetails = "incomplete", &rsIncomplete{Reason: "content_filter"}
	}
	return o
}

// EncodeResponsesObject writes a complete answer as a response object.
func EncodeResponsesObject(s *ResponseShell, r *Response, completedAt int64) []byte {
	var out []Item
	if r.Text != "" || r.Refusal != "" || len(r.ToolCalls) == 0 {
		msg := Item{ID: s.itemID("msg", 0), Type: ItemMessage, Role: RoleAssistant, Status: "completed"}
		if r.Refusal != "" {
			refusal := r.Refusal
			msg.Content = []ItemPart{{Type: "refusal", Refusal: &refusal}}
		} else {
			msg.Content = []ItemPart{textPart(r.Text)}
		}
		out = append(out, msg)
	}
	for _, tc := range r.ToolCalls {
		args := tc.Arguments
		out = append(out, Item{ID: s.itemID("fc", len(out)), Type: ItemFunctionCall, Status: "completed", CallID: tc.ID, Name: tc.Name, Arguments: &args})
	}
	s.Model = firstOf(r.Model, s.Model)
	b, _ := json.Marshal(s.object("completed", out, &r.Usage, r.Finish, completedAt))
	return b
}

// EncodeResponsesStatus writes a response object with no output in a
// status (in_progress, failed, cancelled): what GET /v1/responses/{id}
// answers for a turn that has not, or did not, finish.
func EncodeResponsesStatus(s *ResponseShell, status, code, message string) []byte {
	o := s.object(status, nil, nil, "", 0)
	if code != "" {
		o.Error = &rsError{Code: code, Message: message}
	}
	b, _ := json.Marshal(o)
	return b
}

var emptyArray = json.RawMessage(`[]`)

func textPart(text string) ItemPart {
	return ItemPart{Type: "output_text", Text: &text, Annotations: &emptyArray, Logprobs: &emptyArray}
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// itemID is the id of output item index of the response: derived from
// the response id, so a replay names its items as the original did.
func (s *ResponseShell) itemID(kind string, index int) string {
	return kind + "_" + strings.TrimPrefix(s.ID, "resp_") + strconv.Itoa(index)
}

// ResponseOutput reads the output items and the usage of a stored
// response object.
func ResponseOutput(object []byte) ([]Item, gw.Usage, error) {
	var o struct {
		Output []Item   `json:"output"`
		Usage  *rsUsage `json:"usage"`
	}
	if err := json.Unmarshal(object, &o); err != nil {
		return nil, gw.Usage{}, fmt.Errorf("response object: %w", err)
	}
	var u gw.Usage
	if o.Usage != nil {
		u = gw.Usage{InputTokens: o.Usage.InputTokens, OutputTokens: o.Usage.OutputTokens}
	}
	return o.Output, u, nil
}

// ResponsesEncoder writes a turn's stream as the Responses API's events
// (response.created, response.in_progress, output items and their deltas,
// response.completed), numbering them with sequence_number. It keeps the
// output it wrote, so the finished response object can be stored.
type ResponsesEncoder struct {
	shell   ResponseShell
	seq     int
	output  []Item
	open    int // index of the open output item, -1: none
	text    strings.Builder
	refusal bool
	args    strings.Builder
	final   []byte
}

// NewResponsesEncoder starts a stream encoder for the response s.
func NewResponsesEncoder(s ResponseShell) *ResponsesEncoder {
	return &ResponsesEncoder{shell: s, open: -1}
}

// SetModel makes the objects from now on (the final one) name model.
func (e *ResponsesEncoder) SetModel(model string) { e.shell.Model = model }

// Final is the response object the stream ended with (response.completed,
// response.incomplete or response.failed); nil before its end.
func (e *ResponsesEncoder) Final() []byte { return e.final }

func (e *ResponsesEncoder) event(dst []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	b, _ := json.Marshal(fields)
	return sse.AppendEvent(dst, typ, b)
}

// Start writes response.created and response.in_progress.
func (e *ResponsesEncoder) Start(dst []byte, _ int64) []byte {
	o := e.shell.object("in_progress", nil, nil, "", 0)
	dst = e.event(dst, "response.created", map[string]any{"response": o})
	return e.event(dst, "response.in_progress", map[string]any{"response": o})
}

func (e *ResponsesEncoder) openMessage(dst []byte, refusal bool) []byte {
	if e.open >= 0 && e.output[e.open].Type == ItemMessage && e.refusal == refusal {
		return dst
	}
	dst = e.closeItem(dst)
	it := Item{ID: e.shell.itemID("msg", len(e.output)), Type: ItemMessage, Role: RoleAssistant, Status: "in_progress", Content: []ItemPart{}}
	e.output = append(e.output, it)
	e.open, e.refusal = len(e.output)-1, refusal
	dst = e.event(dst, "response.output_item.added", map[string]any{"output_index": e.open, "item": it})
	part := textPart("")
	if refusal {
		empty := ""
		part = ItemPart{Type: "refusal", Refusal: &empty}
	}
	return e.event(dst, "response.content_part.added", map[string]any{"item_id": it.ID, "output_index": e.open, "content_index": 0, "part": part})
}

// Text writes an output_text delta, opening a message item first.
func (e *ResponsesEncoder) Text(dst []byte, text string) []byte {
	dst = e.openMessage(dst, false)
	e.text.WriteString(text)
	return e.event(dst, "response.output_text.delta", map[string]any{"item_id": e.output[e.open].ID, "output_index": e.open,
		"content_index": 0, "delta": text, "logprobs": emptyArray})
}

// Refusal writes a refusal delta.
func (e *ResponsesEncoder) Refusal(dst []byte, text string) []byte {
	dst = e.openMessage(dst, true)
	e.text.WriteString(text)
	return e.event(dst, "response.refusal.delta", map[string]any{"item_id": e.output[e.open].ID, "output_index": e.open,
		"content_index": 0, "delta": text})
}

// ToolStart opens a function_call item.
func (e *ResponsesEncoder) ToolStart(dst []byte, _ int, id, name string) []byte {
	dst = e.closeItem(dst)
	empty := ""
	it := Item{ID: e.shell.itemID("fc", len(e.output)), Type: ItemFunctionCall, Status: "in_progress", CallID: id, Name: name, Arguments: &empty}
	e.output = append(e.output, it)
	e.open = len(e.output) - 1
	return e.event(dst, "response.output_item.added", map[string]any{"output_index": e.open, "item": it})
}

// ToolArgs writes a function_call_arguments delta.
func (e *ResponsesEncoder) ToolArgs(dst []byte, _ int, args string) []byte {
	if e.open < 0 || e.output[e.open].Type != ItemFunctionCall {
		return dst
	}
	e.args.WriteString(args)
	return e.event(dst, "response.function_call_arguments.delta", map[string]any{"item_id": e.output[e.open].ID,
		"output_index": e.open, "delta": args})
}

// closeItem ends the open output item with its done events.
func (e *ResponsesEncoder) closeItem(dst []byte) []byte {
	if e.open < 0 {
		return dst
	}
	i := e.open
	it := &e.output[i]
	it.Status = "completed"
	switch it.Type {
	case ItemMessage:
		text := e.text.String()
		part := textPart(text)
		if e.refusal {
			part = ItemPart{Type: "refusal", Refusal: &text}
			dst = e.event(dst, "response.refusal.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0, "refusal": text})
		} else {
			dst = e.event(dst, "response.output_text.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0,
				"text": text, "logprobs": emptyArray})
		}
		it.Content = []ItemPart{part}
		dst = e.event(dst, "response.content_part.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0, "part": part})
		e.text.Reset()
	case ItemFunctionCall:
		args := e.args.String()
		it.Arguments = &args
		dst = e.event(dst, "response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i,
			"name": it.Name, "arguments": args})
		e.args.Reset()
	}
	e.open = -1
	return e.event(dst, "response.output_item.done", map[string]any{"output_index": i, "item": *it})
}

// Finish closes the open item and writes response.completed (or
// response.incomplete when the output limit or a filter cut it short).
func (e *ResponsesEncoder) Finish(dst []byte, finish string, u gw.Usage, _ bool) []byte {
	if len(e.output) == 0 {
		dst = e.openMessage(dst, false)
	}
	dst = e.closeItem(dst)
	o := e.shell.object("completed", e.output, &u, finish, e.shell.now())
	typ := "response.completed"
	if o.Status == "incomplete" {
		typ = "response.incomplete"
	}
	e.final, _ = json.Marshal(o)
	return e.event(dst, typ, map[string]any{"response": o})
}

// Error ends the stream with an error event and response.failed.
func (e *ResponsesEncoder) Error(dst []byte, ce *ClientError) []byte {
	og := map[string]any{"request_id": ce.RequestID, "emitted_tokens": ce.EmittedTokens}
	if ce.Terminal != "" {
		og["terminal"], og["reason"] = ce.Terminal, ce.Reason
	}
	var param any
	if ce.Param != "" {
		param = ce.Param
	}
	dst = e.event(dst, "error", map[string]any{"code": ce.Code, "message": ce.Message, "param": param, "oncegate": og})
	o := e.shell.object("failed", e.output, nil, "", 0)
	o.Error = &rsError{Code: ce.Code, Message: ce.Message}
	e.final, _ = json.Marshal(o)
	return e.event(dst, "response.failed", map[string]any{"response": o})
}

// StreamResponseObject writes a stored response object as the stream of
// events that would have produced it: what a streaming retry of a turn
// that finished gets when the stream's own bytes are gone.
func StreamResponseObject(object []byte) []byte {
	var o map[string]json.RawMessage
	if err := json.Unmarshal(object, &o); err != nil {
		return nil
	}
	var items []Item
	_ = json.Unmarshal(o["output"], &items)
	e := &ResponsesEncoder{open: -1}
	start := make(map[string]json.RawMessage, len(o))
	for k, v := range o {
		start[k] = v
	}
	start["status"], start["output"], start["usage"] = json.RawMessage(`"in_progress"`), emptyArray, json.RawMessage(`null`)
	start["completed_at"], start["incomplete_details"] = json.RawMessage(`null`), json.RawMessage(`null`)
	dst := e.event(nil, "response.created", map[string]any{"response": start})
	dst = e.event(dst, "response.in_progress", map[string]any{"response": start})
	for i, it := range items {
		added := it
		added.Status = "in_progress"
		switch it.Type {
		case ItemMessage:
			added.Content = []ItemPart{}
			dst = e.event(dst, "response.output_item.added", map[string]any{"output_index": i, "item": added})
			for j, p := range it.Content {
				empty := ""
				first := ItemPart{Type: p.Type, Text: &empty, Annotations: &emptyArray, Logprobs: &emptyArray}
				kind, field, text := "output_text", "text", ""
				if p.Type == "refusal" {
					first = ItemPart{Type: p.Type, Refusal: &empty}
					kind, field = "refusal", "refusal"
					if p.Refusal != nil {
						text = *p.Refusal
					}
				} else if p.Text != nil {
					text = *p.Text
				}
				ids := map[string]any{"item_id": it.ID, "output_index": i, "content_index": j}
				with := func(k string, v any) map[string]any {
					m := map[string]any{k: v}
					for a, b := range ids {
						m[a] = b
					}
					return m
				}
				dst = e.event(dst, "response.content_part.added", with("part", first))
				dst = e.event(dst, "response."+kind+".delta", with("delta", text))
				dst = e.event(dst, "response."+kind+".done", with(field, text))
				dst = e.event(dst, "response.content_part.done", with("part", p))
			}
		case ItemFunctionCall:
			empty := ""
			added.Arguments = &empty
			dst = e.event(dst, "response.output_item.added", map[string]any{"output_index": i, "item": added})
			args := ""
			if it.Arguments != nil {
				args = *it.Arguments
			}
			dst = e.event(dst, "response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": i, "delta": args})
			dst = e.event(dst, "response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i, "name": it.Name, "arguments": args})
		}
		dst = e.event(dst, "response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	typ := "response.completed"
	if string(o["status"]) == `"incomplete"` {
		typ = "response.incomplete"
	}
	return e.event(dst, typ, map[string]any{"response": json.RawMessage(object)})
}
