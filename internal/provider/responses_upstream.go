package provider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// A stateful route (provider type openai-responses) is an upstream
// Responses API that stores the conversation itself: each attempt sends
// only the turn's new input, into an upstream conversation object.

// Bare returns items without their ids and statuses: what is sent
// upstream, where the upstream names them itself.
func Bare(items []Item) []Item {
	out := make([]Item, len(items))
	for i, it := range items {
		it.ID, it.Status = "", ""
		out[i] = it
	}
	return out
}

// BuildResponsesUpstream writes one attempt's body for a stateful route:
// the turn's input into the upstream conversation, stored.
func BuildResponsesUpstream(r *ResponsesRequest, input []Item, model, conversation string, stream bool, maxTokens int64) ([]byte, error) {
	body := map[string]any{"model": model, "input": Bare(input), "store": true, "stream": stream}
	if conversation != "" {
		body["conversation"] = conversation
	}
	if r.Instructions != nil {
		body["instructions"] = *r.Instructions
	}
	if maxTokens > 0 {
		body["max_output_tokens"] = maxTokens
	}
	if isSet(r.ToolsRaw) {
		body["tools"] = r.ToolsRaw
	}
	if isSet(r.ToolChoiceRaw) {
		body["tool_choice"] = r.ToolChoiceRaw
	}
	if r.Temperature != nil {
		body["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		body["top_p"] = *r.TopP
	}
	if r.ParallelToolCalls != nil {
		body["parallel_tool_calls"] = *r.ParallelToolCalls
	}
	if isSet(r.Metadata) {
		body["metadata"] = r.Metadata
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("responses request: %w", err)
	}
	return b, nil
}

// rsObjectIn is a response object as read from an upstream.
type rsObjectIn struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Model             string        `json:"model"`
	CreatedAt         float64       `json:"created_at"`
	Status            string        `json:"status"`
	Output            []Item        `json:"output"`
	Usage             *rsUsage      `json:"usage"`
	IncompleteDetails *rsIncomplete `json:"incomplete_details"`
	Error             *rsError      `json:"error"`
}

// DecodeResponsesObject reads an upstream response object: the neutral
// answer (ID is the upstream's response id) and its output items.
func DecodeResponsesObject(body []byte) (*Response, []Item, error) {
	var o rsObjectIn
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, nil, fmt.Errorf("malformed response object: %w", err)
	}
	if o.Object != "response" || o.ID == "" {
		return nil, nil, fmt.Errorf("not a response object (object %q, id %q)", o.Object, o.ID)
	}
	r := ResponseOf(o.Output)
	r.ID, r.Model, r.Created = o.ID, o.Model, int64(o.CreatedAt)
	if o.Usage != nil {
		r.Usage = gw.Usage{InputTokens: o.Usage.InputTokens, OutputTokens: o.Usage.OutputTokens, CachedTokens: o.Usage.InputDetails["cached_tokens"]}
	}
	r.Finish = finishOf(o.Status, o.IncompleteDetails, len(r.ToolCalls) > 0)
	return r, o.Output, nil
}

// ResponseOf is the neutral answer output items make.
func ResponseOf(items []Item) *Response {
	r := &Response{Finish: FinishStop}
	for _, it := range items {
		switch it.Type {
		case ItemMessage:
			for _, p := range it.Content {
				switch {
				case p.Type == "refusal" && p.Refusal != nil:
					r.Refusal += *p.Refusal
				case p.Text != nil:
					r.Text += *p.Text
				}
			}
		case ItemFunctionCall:
			tc := ToolCall{ID: it.CallID, Name: it.Name}
			if it.Arguments != nil {
				tc.Arguments = *it.Arguments
			}
			r.ToolCalls = append(r.ToolCalls, tc)
		}
	}
	if len(r.ToolCalls) > 0 {
		r.Finish = FinishToolCalls
	}
	return r
}

func finishOf(status string, inc *rsIncomplete, tools bool) string {
	switch {
	case status == "incomplete" && inc != nil && inc.Reason == "content_filter":
		return FinishContentFilter
	case status == "incomplete":
		return FinishLength
	case tools:
		return FinishToolCalls
	}
	return FinishStop
}

// responsesDecoder turns an upstream Responses stream into neutral events.
type responsesDecoder struct{}

type rsEvent struct {
	Type        string          `json:"type"`
	Response    *rsObjectIn     `json:"response"`
	Item        *Item           `json:"item"`
	OutputIndex int             `json:"output_index"`
	Delta       string          `json:"delta"`
	Code        json.RawMessage `json:"code"`
	Message     string          `json:"message"`
}

func (d *responsesDecoder) Decode(ev sse.Event, out []Event) ([]Event, error) {
	var e rsEvent
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return out, fmt.Errorf("malformed event: %w", err)
	}
	if e.Type == "" {
		e.Type = ev.Type
	}
	switch e.Type {
	case "response.created":
		if e.Response == nil {
			return out, fmt.Errorf("response.created without a response")
		}
		return append(out, Event{Kind: EvStart, ID: e.Response.ID, Model: e.Response.Model}), nil
	case "response.output_text.delta":
		return append(out, Event{Kind: EvText, Text: e.Delta}), nil
	case "response.refusal.delta":
		return append(out, Event{Kind: EvRefusal, Text: e.Delta}), nil
	case "response.output_item.added":
		if e.Item != nil && e.Item.Type == ItemFunctionCall {
			return append(out, Event{Kind: EvToolStart, ToolIndex: e.OutputIndex, ToolID: e.Item.CallID, ToolName: e.Item.Name}), nil
		}
	case "response.function_call_arguments.delta":
		return append(out, Event{Kind: EvToolArgs, ToolIndex: e.OutputIndex, Args: e.Delta}), nil
	case "response.completed", "response.incomplete":
		if e.Response == nil {
			return out, fmt.Errorf("%s without a response", e.Type)
		}
		r := ResponseOf(e.Response.Output)
		if u := e.Response.Usage; u != nil {
			out = append(out, Event{Kind: EvUsage, Usage: gw.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
				CachedTokens: u.InputDetails["cached_tokens"]}})
		}
		out = append(out, Event{Kind: EvFinish, Finish: finishOf(e.Response.Status, e.Response.IncompleteDetails, len(r.ToolCalls) > 0)})
		return append(out, Event{Kind: EvDone}), nil
	case "response.failed":
		ue := &UpstreamError{Type: "server_error", Message: "the response failed"}
		if e.Response != nil && e.Response.Error != nil {
			ue.Code, ue.Message = e.Response.Error.Code, e.Response.Error.Message
		}
		return append(out, Event{Kind: EvError, Err: ue}), nil
	case "error":
		return append(out, Event{Kind: EvError, Err: &UpstreamError{Type: "server_error", Code: strings.Trim(string(e.Code), `"`), Message: e.Message}}), nil
	}
	return out, nil
}
