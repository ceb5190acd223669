package provider

import (
	"encoding/json"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// A turn's stream on the wire: the Responses API's events, written as the
// turn is generated, or rebuilt from a stored response object.

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
