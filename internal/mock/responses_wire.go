package mock

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// This file is the mock's own reading of the OpenAI Responses API's
// requests and its writing of items (platform.openai.com/docs/api-reference/responses
// and /conversations: the shapes openai-go's responses and conversations
// packages decode), independent of internal/provider.

// Item types the Responses fake reads and writes.
const (
	itemMessage    = "message"
	itemCall       = "function_call"
	itemCallOutput = "function_call_output"
)

// Item is one item the Responses fake stores — in a conversation, or as a
// response's input or output: a message, a function call or a function
// call's output.
type Item struct {
	// ID is the id the fake gave the item.
	ID string
	// Type is "message", "function_call" or "function_call_output".
	Type string
	// Role is a message's: user, assistant, system or developer.
	Role string
	// Parts is a message's content, in order.
	Parts []Part
	// CallID names a function call (and, on its output, the call it
	// answers); Name and Arguments are the call's.
	CallID, Name, Arguments string
	// Output is the text of a function call's output.
	Output string
	// output is a call output's output as it was sent (a string or a list
	// of content parts), echoed as it came.
	output json.RawMessage
}

// Part is one piece of a message's content.
type Part struct {
	// Type is input_text, output_text, refusal, or a part that is not
	// text (input_image, input_file, input_audio).
	Type string
	// Text is a text part's text or a refusal's.
	Text string
	// raw is a part that is not text, echoed as it was sent.
	raw json.RawMessage
}

// isText reports whether a part is text the model reads (a refusal is
// too: it is what the assistant said).
func (p Part) isText() bool {
	return p.Type == "input_text" || p.Type == "output_text" || p.Type == "refusal"
}

// Text is what an item says: a message's text and refusal parts joined,
// a call output's output.
func (it Item) Text() string {
	if it.Type == itemCallOutput {
		return it.Output
	}
	var b strings.Builder
	for _, p := range it.Parts {
		if p.isText() {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// wire is the item as the API writes it, in a status (a message being
// streamed has no content yet; an output_text part carries its
// annotations and logprobs).
func (it Item) wire(status string) map[string]any {
	w := map[string]any{"type": it.Type, "status": status}
	if it.ID != "" {
		w["id"] = it.ID
	}
	switch it.Type {
	case itemMessage:
		content := make([]any, len(it.Parts))
		for i, p := range it.Parts {
			content[i] = p.wire()
		}
		w["role"], w["content"] = it.Role, content
	case itemCall:
		w["call_id"], w["name"], w["arguments"] = it.CallID, it.Name, it.Arguments
	case itemCallOutput:
		w["call_id"] = it.CallID
		if it.output != nil {
			w["output"] = it.output
		} else {
			w["output"] = it.Output
		}
	}
	return w
}

func (p Part) wire() any {
	switch p.Type {
	case "output_text":
		return map[string]any{"type": p.Type, "text": p.Text, "annotations": []any{}, "logprobs": []any{}}
	case "input_text":
		return map[string]any{"type": p.Type, "text": p.Text}
	case "refusal":
		return map[string]any{"type": p.Type, "refusal": p.Text}
	}
	return p.raw
}

// rsInvalid is a request the Responses fake refuses with a 400, naming
// the parameter at fault as OpenAI does.
type rsInvalid struct{ param, msg string }

func (e *rsInvalid) Error() string { return e.msg }

func invalidf(param, format string, args ...any) *rsInvalid {
	return &rsInvalid{param: param, msg: fmt.Sprintf(format, args...)}
}

// isSet reports whether a JSON field was sent and is not null.
func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// parseItems reads input items: a string (one user message) or a list of
// items and messages, as POST /v1/responses and POST /v1/conversations
// take them. param names the field in errors.
func parseItems(raw json.RawMessage, param string) ([]Item, *rsInvalid) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Item{{Type: itemMessage, Role: roleUser, Parts: []Part{{Type: "input_text", Text: s}}}}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidf(param, "Invalid type for '%s': expected a string or an array of input items.", param)
	}
	items := make([]Item, 0, len(list))
	for i, one := range list {
		it, err := parseItem(one, fmt.Sprintf("%s[%d]", param, i))
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func parseItem(raw json.RawMessage, param string) (Item, *rsInvalid) {
	var in struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return Item{}, invalidf(param, "Invalid input item at '%s': %v.", param, err)
	}
	if in.Type == "" && in.Role != "" {
		in.Type = itemMessage // an easy input message: role and content only
	}
	switch in.Type {
	case itemMessage:
		return parseMessage(in.Role, in.Content, param)
	case itemCall:
		switch {
		case in.CallID == "":
			return Item{}, invalidf(param+".call_id", "Missing required parameter: '%s.call_id'.", param)
		case in.Name == "":
			return Item{}, invalidf(param+".name", "Missing required parameter: '%s.name'.", param)
		}
		return Item{Type: itemCall, CallID: in.CallID, Name: in.Name, Arguments: in.Arguments}, nil
	case itemCallOutput:
		if in.CallID == "" {
			return Item{}, invalidf(param+".call_id", "Missing required parameter: '%s.call_id'.", param)
		}
		it := Item{Type: itemCallOutput, CallID: in.CallID, output: in.Output}
		if json.Unmarshal(in.Output, &it.Output) != nil {
			// A list of content parts: its text is what the model reads.
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(in.Output, &parts) != nil {
				return Item{}, invalidf(param+".output", "Invalid type for '%s.output': expected a string or an array of content parts.", param)
			}
			for _, p := range parts {
				it.Output += p.Text
			}
		}
		return it, nil
	}
	return Item{}, invalidf(param+".type", "Invalid value: '%s'. The mock reads message, function_call and function_call_output items.", in.Type)
}

func parseMessage(role string, content json.RawMessage, param string) (Item, *rsInvalid) {
	switch role {
	case roleUser, roleAssistant, "system", "developer":
	default:
		return Item{}, invalidf(param+".role", "Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", role)
	}
	it := Item{Type: itemMessage, Role: role}
	var s string
	if json.Unmarshal(content, &s) == nil {
		typ := "input_text"
		if role == roleAssistant {
			typ = "output_text"
		}
		it.Parts = []Part{{Type: typ, Text: s}}
		return it, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(content, &parts); err != nil {
		return Item{}, invalidf(param+".content", "Invalid type for '%s.content': expected a string or an array of content parts.", param)
	}
	for j, raw := range parts {
		var p struct {
			Type    string  `json:"type"`
			Text    *string `json:"text"`
			Refusal *string `json:"refusal"`
		}
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		if err := json.Unmarshal(raw, &p); err != nil {
			return Item{}, invalidf(pp, "Invalid content part at '%s'.", pp)
		}
		switch p.Type {
		case "input_text", "output_text":
			if p.Text == nil {
				return Item{}, invalidf(pp+".text", "Missing required parameter: '%s.text'.", pp)
			}
			it.Parts = append(it.Parts, Part{Type: p.Type, Text: *p.Text})
		case "refusal":
			if p.Refusal == nil {
				return Item{}, invalidf(pp+".refusal", "Missing required parameter: '%s.refusal'.", pp)
			}
			it.Parts = append(it.Parts, Part{Type: p.Type, Text: *p.Refusal})
		case "input_image", "input_file", "input_audio":
			it.Parts = append(it.Parts, Part{Type: p.Type, raw: raw})
		default:
			return Item{}, invalidf(pp+".type", "Invalid value: '%s'. Supported values are: 'input_text', 'output_text', 'refusal', 'input_image', 'input_file' and 'input_audio'.", p.Type)
		}
	}
	return it, nil
}

// rsRequest is the part of a POST /v1/responses body the mock reads; what
// it does not act on it echoes in the response object.
type rsRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID string          `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	Background         bool            `json:"background"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Metadata           json.RawMessage `json:"metadata"`
	Text               json.RawMessage `json:"text"`
	Reasoning          json.RawMessage `json:"reasoning"`
	User               *string         `json:"user"`
	SafetyIdentifier   *string         `json:"safety_identifier"`
	PromptCacheKey     *string         `json:"prompt_cache_key"`
}

// rsTool is a function tool a request offers.
type rsTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// rsTurn is one POST /v1/responses being answered: what it asks, and
// what its response commits.
type rsTurn struct {
	req   rsRequest
	input []Item
	// history is what the turn follows: its conversation's items or its
	// previous response's.
	history []Item
	conv    string
	tools   []rsTool
	// toolMode and toolName are tool_choice, in the ask's terms.
	toolMode, toolName string
	// id and created name the response once the mock took the request.
	id      string
	created int64
}

// decodeResponses reads a Responses request; an error is a 400.
func decodeResponses(body []byte) (*rsTurn, *rsInvalid) {
	t := &rsTurn{}
	if err := json.Unmarshal(body, &t.req); err != nil {
		return nil, invalidf("", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	r := &t.req
	switch {
	case r.Model == "":
		return nil, invalidf("model", "Missing required parameter: 'model'.")
	case r.Background:
		return nil, invalidf("background", "The mock does not run background responses.")
	case r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1:
		return nil, invalidf("max_output_tokens", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got %d instead.", *r.MaxOutputTokens)
	}
	if isSet(r.Conversation) {
		var id string
		if json.Unmarshal(r.Conversation, &id) != nil {
			var ref struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(r.Conversation, &ref)
			id = ref.ID
		}
		if id == "" {
			return nil, invalidf("conversation", "Invalid 'conversation': expected a conversation id or an object with an id.")
		}
		t.conv = id
	}
	if t.conv != "" && r.PreviousResponseID != "" {
		return nil, invalidf("previous_response_id", "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'.")
	}
	if isSet(r.Input) {
		var err *rsInvalid
		if t.input, err = parseItems(r.Input, "input"); err != nil {
			return nil, err
		}
	} else if t.conv == "" && r.PreviousResponseID == "" {
		return nil, invalidf("input", "Missing required parameter: 'input'.")
	}
	if isSet(r.Metadata) {
		var m map[string]string
		if json.Unmarshal(r.Metadata, &m) != nil {
			return nil, invalidf("metadata", "Invalid type for 'metadata': expected an object of strings.")
		}
	}
	if isSet(r.Tools) {
		var tools []rsTool
		if json.Unmarshal(r.Tools, &tools) != nil {
			return nil, invalidf("tools", "Invalid type for 'tools': expected an array of tools.")
		}
		for _, tl := range tools {
			if tl.Type == "function" { // hosted tools are the provider's: the mock calls none
				t.tools = append(t.tools, tl)
			}
		}
	}
	if isSet(r.ToolChoice) {
		var mode string
		if json.Unmarshal(r.ToolChoice, &mode) == nil {
			if mode != "auto" && mode != "none" && mode != "required" {
				return nil, invalidf("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", mode)
			}
			t.toolMode = mode
		} else {
			var named struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			_ = json.Unmarshal(r.ToolChoice, &named)
			if named.Type == "function" {
				t.toolMode, t.toolName = "tool", named.Name
			}
		}
	}
	return t, nil
}

// ask is what the mock answers: the conversation so far (the history,
// then the request's input) read as turns. System and developer messages join
// the instructions as the system prompt; a function call joins the
// assistant turn before it; a call's output is a tool turn. The prompt is
// counted as docs/mock.md says.
func (t *rsTurn) ask() *ask {
	a := &ask{model: t.req.Model, stream: t.req.Stream, toolMode: t.toolMode, toolName: t.toolName}
	if t.req.MaxOutputTokens != nil {
		a.maxTokens = *t.req.MaxOutputTokens
	}
	var system []string
	if in := t.req.Instructions; in != nil && *in != "" {
		system = append(system, *in)
	}
	n := int64(perRequest)
	for _, it := range append(slices.Clone(t.history), t.input...) {
		switch it.Type {
		case itemMessage:
			if it.Role == "system" || it.Role == "developer" {
				var b strings.Builder
				for _, p := range it.Parts {
					if p.Type == "input_text" || p.Type == "output_text" {
						b.WriteString(p.Text)
					}
				}
				system = append(system, b.String())
				continue
			}
			n += perMessage
			for _, p := range it.Parts {
				if p.isText() {
					n += textTokens(p.Text)
				} else {
					n += perImage
				}
			}
			a.turns = append(a.turns, turn{role: it.Role, text: it.Text()})
		case itemCall:
			if k := len(a.turns); k == 0 || a.turns[k-1].role != roleAssistant {
				a.turns = append(a.turns, turn{role: roleAssistant})
				n += perMessage
			}
			last := &a.turns[len(a.turns)-1]
			last.calls += it.Name + it.Arguments
			last.hasCalls = true
			n += textTokens(it.Name) + textTokens(it.Arguments)
		case itemCallOutput:
			a.turns = append(a.turns, turn{role: roleTool, text: it.Output})
			n += perMessage + textTokens(it.Output)
		}
	}
	a.system = strings.Join(system, "\n\n")
	if a.system != "" {
		n += perMessage + textTokens(a.system)
	}
	for _, tl := range t.tools {
		a.tools = append(a.tools, tl.Name)
		n += textTokens(tl.Name) + textTokens(tl.Description) + textTokens(string(tl.Parameters))
	}
	a.promptTokens = n
	return a
}
