package provider

import (
	"encoding/json"
	"fmt"
	"strings"
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
