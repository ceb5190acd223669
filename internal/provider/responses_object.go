package provider

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
)

// A finished turn on the wire: the response object the gateway answers,
// stores and replays, built from the request's settings (its shell) and
// the turn's output, and read back from storage; and a page of items.

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
