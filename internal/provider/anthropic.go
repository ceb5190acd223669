package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// Anthropic Messages wire types (docs.anthropic.com/en/api/messages).

// AnthropicVersion is the API version oncegate speaks upstream.
const AnthropicVersion = "2023-06-01"

type anRequest struct {
	Model         string          `json:"model"`
	MaxTokens     int64           `json:"max_tokens"`
	System        json.RawMessage `json:"system,omitempty"`
	Messages      []anMessage     `json:"messages"`
	Tools         []anTool        `json:"tools,omitempty"`
	ToolChoice    *anToolChoice   `json:"tool_choice,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Metadata      *struct {
		UserID string `json:"user_id,omitempty"`
	} `json:"metadata,omitempty"`
	// Thinking is read, never written: a translated request carries none.
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking,omitempty"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *anSource       `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Data      string          `json:"data,omitempty"`
}

type anSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

type anUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// usage folds cache reads and writes into input, as receipts count every
// prompt token (Anthropic's input_tokens counts neither); cached_tokens
// keeps the reads and cache_write_tokens the writes, which routes may
// price apart.
func (u *anUsage) usage() gw.Usage {
	return gw.Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens, CachedTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
}

func anUsageOf(u gw.Usage) anUsage {
	return anUsage{InputTokens: u.InputTokens - u.CachedTokens - u.CacheWriteTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CachedTokens, CacheCreationInputTokens: u.CacheWriteTokens}
}

// parseAnthropicRequest reads a Messages request body.
func parseAnthropicRequest(body []byte) (*Request, error) {
	var in anRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("", "request body is not a valid messages request: %v", jsonErr(err))
	}
	if in.Model == "" {
		return nil, invalid("model", "model is required")
	}
	if in.MaxTokens <= 0 {
		return nil, invalid("max_tokens", "max_tokens is required and must be positive")
	}
	if len(in.Messages) == 0 {
		return nil, invalid("messages", "messages must not be empty")
	}
	r := &Request{Model: in.Model, MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP,
		Stop: in.StopSequences, Stream: in.Stream}
	if in.Metadata != nil {
		r.User = in.Metadata.UserID
	}
	r.Thinking = in.Thinking != nil && in.Thinking.Type != "" && in.Thinking.Type != "disabled"
	system, err := anSystem(in.System)
	if err != nil {
		return nil, err
	}
	r.System = system
	for i, m := range in.Messages {
		msgs, err := anMessageIR(m, fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, err
		}
		r.Messages = append(r.Messages, msgs...)
	}
	for i, t := range in.Tools {
		if t.Name == "" {
			return nil, invalid(fmt.Sprintf("tools[%d].name", i), "a tool needs a name")
		}
		r.Tools = append(r.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			r.ToolChoice = &ToolChoice{Mode: ToolAuto}
		case "none":
			r.ToolChoice = &ToolChoice{Mode: ToolNone}
		case "any":
			r.ToolChoice = &ToolChoice{Mode: ToolRequired}
		case "tool":
			r.ToolChoice = &ToolChoice{Mode: ToolNamed, Name: tc.Name}
		default:
			return nil, invalid("tool_choice.type", "unknown tool_choice type %q", tc.Type)
		}
		if tc.DisableParallelToolUse {
			no := false
			r.ParallelToolCalls = &no
		}
	}
	return r, nil
}

func anSystem(raw json.RawMessage) (string, error) {
	return textOrBlocks(raw, "\n\n", "system", "system must be a string or an array of text blocks")
}

// textOrBlocks reads a field that is either a string or an array of text
// blocks, joining the blocks' text with sep.
func textOrBlocks(raw json.RawMessage, sep, param, msg string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", invalid(param, "%s", msg)
	}
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = b.Text
	}
	return strings.Join(parts, sep), nil
}

// anMessageIR reads one Messages turn. A user turn carrying tool_result
// blocks becomes one neutral tool message per result, then a user message
// for any remaining content.
func anMessageIR(m anMessage, param string) ([]Message, error) {
	if m.Role != RoleUser && m.Role != RoleAssistant {
		return nil, invalid(param+".role", "role must be user or assistant, found %q", m.Role)
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []Message{{Role: m.Role, Parts: []Part{{Type: PartText, Text: s}}}}, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, invalid(param+".content", "content must be a string or an array of content blocks")
	}
	var out []Message
	cur := Message{Role: m.Role}
	for i, raw := range blocks {
		bparam := fmt.Sprintf("%s.content[%d]", param, i)
		var b anBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, invalid(bparam, "malformed content block")
		}
		switch b.Type {
		case "text":
			cur.Parts = append(cur.Parts, Part{Type: PartText, Text: b.Text, Raw: raw})
		case "image":
			if b.Source == nil {
				return nil, invalid(bparam+".source", "an image needs a source")
			}
			cur.Parts = append(cur.Parts, Part{Type: PartImage, ImageURL: b.Source.URL, MediaType: b.Source.MediaType, Data: b.Source.Data, Raw: raw})
		case "document":
			cur.Parts = append(cur.Parts, Part{Type: PartAudio, Raw: raw}) // non-text input: route must accept it
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			cur.ToolCalls = append(cur.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		case "tool_result":
			text, err := anToolResultText(b.Content, bparam)
			if err != nil {
				return nil, err
			}
			out = append(out, Message{Role: RoleTool, ToolCallID: b.ToolUseID, IsError: b.IsError, Parts: []Part{{Type: PartText, Text: text}}})
		case "thinking", "redacted_thinking":
			// Extended-thinking blocks carry no answer text.
		default:
			return nil, invalid(bparam+".type", "unsupported content block type %q", b.Type)
		}
	}
	if len(cur.Parts) > 0 || len(cur.ToolCalls) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out, nil
}

func anToolResultText(raw json.RawMessage, param string) (string, error) {
	return textOrBlocks(raw, "", param+".content", "tool_result content must be a string or text blocks")
}

// buildAnthropicRequest writes a neutral request as a Messages body.
// maxTokens is required by the API: the request's own or the route's cap.
func buildAnthropicRequest(r *Request, model string, stream bool, maxTokens int64) ([]byte, error) {
	out := anRequest{Model: model, MaxTokens: maxTokens, Temperature: r.Temperature, TopP: r.TopP,
		StopSequences: r.Stop, Stream: stream}
	if r.MaxTokens > 0 {
		out.MaxTokens = r.MaxTokens
	}
	if r.System != "" {
		out.System, _ = json.Marshal(r.System)
	}
	if r.User != "" {
		out.Metadata = &struct {
			UserID string `json:"user_id,omitempty"`
		}{r.User}
	}
	out.Messages = anMessagesOf(r.Messages)
	for _, t := range r.Tools {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, anTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Mode {
		case ToolRequired:
			out.ToolChoice = &anToolChoice{Type: "any"}
		case ToolNamed:
			out.ToolChoice = &anToolChoice{Type: "tool", Name: tc.Name}
		default:
			out.ToolChoice = &anToolChoice{Type: tc.Mode}
		}
	}
	if p := r.ParallelToolCalls; p != nil && !*p && len(r.Tools) > 0 {
		if out.ToolChoice == nil {
			out.ToolChoice = &anToolChoice{Type: ToolAuto}
		}
		// Anthropic takes the flag on auto, any and a named tool; none
		// calls no tool at all.
		out.ToolChoice.DisableParallelToolUse = out.ToolChoice.Type != ToolNone
	}
	return json.Marshal(out)
}

// anMessagesOf writes neutral messages as Messages turns: tool results go
// into a user turn, and consecutive turns of one role merge, because the
// API requires user and assistant to alternate.
func anMessagesOf(msgs []Message) []anMessage {
	var out []anMessage
	var blocks []any
	role := ""
	flush := func() {
		if role != "" && len(blocks) > 0 {
			content, _ := json.Marshal(blocks)
			out = append(out, anMessage{Role: role, Content: content})
		}
		blocks = nil
	}
	for _, m := range msgs {
		r := m.Role
		if r == RoleTool {
			r = RoleUser
		}
		if r != role {
			flush()
			role = r
		}
		if m.Role == RoleTool {
			blocks = append(blocks, map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": m.Text(), "is_error": m.IsError})
			continue
		}
		for _, p := range m.Parts {
			switch p.Type {
			case PartText:
				if p.Text != "" {
					blocks = append(blocks, map[string]string{"type": "text", "text": p.Text})
				}
			case PartImage:
				src := anSource{Type: "url", URL: p.ImageURL}
				if p.Data != "" {
					src = anSource{Type: "base64", MediaType: p.MediaType, Data: p.Data}
				}
				blocks = append(blocks, map[string]any{"type": "image", "source": src})
			}
		}
		for _, c := range m.ToolCalls {
			input := json.RawMessage(c.Arguments)
			if !json.Valid(input) {
				input = json.RawMessage("{}")
			}
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": input})
		}
	}
	flush()
	return out
}

type anResponse struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Role         string    `json:"role"`
	Model        string    `json:"model"`
	Content      []anBlock `json:"content"`
	StopReason   *string   `json:"stop_reason"`
	StopSequence *string   `json:"stop_sequence"`
	Usage        anUsage   `json:"usage"`
}

// finishFromAnthropic maps a stop_reason to the neutral finish reason.
func finishFromAnthropic(s string) string {
	switch s {
	case "max_tokens", "model_context_window_exceeded":
		return FinishLength
	case "tool_use":
		return FinishToolCalls
	case "refusal":
		return FinishContentFilter
	}
	return FinishStop // end_turn, stop_sequence, pause_turn
}

func finishToAnthropic(s string) string {
	switch s {
	case FinishLength:
		return "max_tokens"
	case FinishToolCalls:
		return "tool_use"
	case FinishContentFilter:
		return "refusal"
	}
	return "end_turn"
}

func decodeAnthropicResponse(body []byte) (*Response, error) {
	var in anResponse
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("messages body: %w", err)
	}
	if in.Type != "message" {
		return nil, fmt.Errorf("messages body has type %q, want message", in.Type)
	}
	r := &Response{ID: in.ID, Model: in.Model, Usage: in.Usage.usage()}
	if in.StopReason != nil {
		r.Finish = finishFromAnthropic(*in.StopReason)
	}
	for _, b := range in.Content {
		switch b.Type {
		case "text":
			r.Text += b.Text
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
		}
	}
	return r, nil
}

func encodeAnthropicResponse(r *Response, id string) []byte {
	out := anResponse{ID: id, Type: "message", Role: "assistant", Model: r.Model, Usage: anUsageOf(r.Usage), Content: []anBlock{}}
	if r.Text != "" {
		out.Content = append(out.Content, anBlock{Type: "text", Text: r.Text})
	}
	if r.Refusal != "" {
		// The Messages API has no refusal field: the refusal is the
		// answer's text, and stop_reason says what it is.
		out.Content = append(out.Content, anBlock{Type: "text", Text: r.Refusal})
	}
	for _, tc := range r.ToolCalls {
		input := json.RawMessage(tc.Arguments)
		if !json.Valid(input) {
			input = json.RawMessage("{}")
		}
		out.Content = append(out.Content, anBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: input})
	}
	stop := finishToAnthropic(r.Finish)
	if r.Refusal != "" && r.Text == "" {
		stop = "refusal"
	}
	out.StopReason = &stop
	b, _ := json.Marshal(out)
	return b
}

// anthropicDecoder turns Messages stream events into neutral events. It
// maps content-block indexes to tool-call ordinals and keeps usage
// cumulative across message_start and message_delta.
type anthropicDecoder struct {
	tools map[int]int // block index → tool ordinal
	usage anUsage
}

type anStreamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string  `json:"id"`
		Model string  `json:"model"`
		Usage anUsage `json:"usage"`
	} `json:"message"`
	Index        int      `json:"index"`
	ContentBlock *anBlock `json:"content_block"`
	Delta        *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		Thinking    string  `json:"thinking"`
		Signature   string  `json:"signature"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             int64  `json:"output_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

func (d *anthropicDecoder) Decode(ev sse.Event, out []Event) ([]Event, error) {
	if ev.Type == "ping" {
		return out, nil
	}
	if ev.Type == "error" {
		return append(out, Event{Kind: EvError, Err: ParseError(0, ev.Data)}), nil
	}
	if text, ok := fastTextBlockDelta(ev.Data); ok {
		return append(out, Event{Kind: EvText, Text: text}), nil
	}
	var e anStreamEvent
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		return out, fmt.Errorf("malformed %s event: %w", ev.Type, err)
	}
	switch e.Type {
	case "message_start":
		if e.Message == nil {
			return out, fmt.Errorf("message_start without a message")
		}
		d.usage = e.Message.Usage
		out = append(out, Event{Kind: EvStart, ID: e.Message.ID, Model: e.Message.Model}, Event{Kind: EvUsage, Usage: d.usage.usage()})
	case "content_block_start":
		if b := e.ContentBlock; b != nil && b.Type == "tool_use" {
			if d.tools == nil {
				d.tools = map[int]int{}
			}
			d.tools[e.Index] = len(d.tools)
			out = append(out, Event{Kind: EvToolStart, ToolIndex: d.tools[e.Index], ToolID: b.ID, ToolName: b.Name})
		} else if b != nil && b.Type == "text" && b.Text != "" {
			out = append(out, Event{Kind: EvText, Text: b.Text})
		} else if b != nil && b.Type == "thinking" && b.Thinking != "" {
			out = append(out, Event{Kind: EvThinking, Text: b.Thinking})
		} else if b != nil && b.Type == "redacted_thinking" {
			out = append(out, Event{Kind: EvRedactedThinking, Text: b.Data})
		}
	case "content_block_delta":
		if e.Delta == nil {
			return out, fmt.Errorf("content_block_delta without a delta")
		}
		switch e.Delta.Type {
		case "text_delta":
			out = append(out, Event{Kind: EvText, Text: e.Delta.Text})
		case "input_json_delta":
			out = append(out, Event{Kind: EvToolArgs, ToolIndex: d.tools[e.Index], Args: e.Delta.PartialJSON})
		case "thinking_delta":
			out = append(out, Event{Kind: EvThinking, Text: e.Delta.Thinking})
		case "signature_delta":
			out = append(out, Event{Kind: EvSignature, Text: e.Delta.Signature})
		}
	case "message_delta":
		if u := e.Usage; u != nil {
			d.usage.OutputTokens = u.OutputTokens
			if u.InputTokens != nil {
				d.usage.InputTokens = *u.InputTokens
			}
			if u.CacheReadInputTokens != nil {
				d.usage.CacheReadInputTokens = *u.CacheReadInputTokens
			}
			if u.CacheCreationInputTokens != nil {
				d.usage.CacheCreationInputTokens = *u.CacheCreationInputTokens
			}
			out = append(out, Event{Kind: EvUsage, Usage: d.usage.usage()})
		}
		if e.Delta != nil && e.Delta.StopReason != nil {
			out = append(out, Event{Kind: EvFinish, Finish: finishFromAnthropic(*e.Delta.StopReason)})
		}
	case "message_stop":
		out = append(out, Event{Kind: EvDone})
	case "content_block_stop":
	default:
		return out, fmt.Errorf("unknown event type %q", e.Type)
	}
	return out, nil
}

// fastTextBlockDelta reads the commonest event of a stream, a text delta,
// when it has exactly the shape Anthropic writes —
// {"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}
// — without decoding it into anStreamEvent. Anything else (ok false)
// takes the general path, which FuzzFastTextBlockDelta checks it always
// agrees with.
func fastTextBlockDelta(data []byte) (string, bool) {
	const head, mid = `{"type":"content_block_delta","index":`, `,"delta":{"type":"text_delta","text":`
	if !bytes.HasPrefix(data, []byte(head)) {
		return "", false
	}
	i := len(head)
	digits := i
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	if n := i - digits; n == 0 || n > 9 || (n > 1 && data[digits] == '0') {
		return "", false // no index, a leading zero, or one encoding/json might not fit
	}
	if !bytes.HasPrefix(data[i:], []byte(mid)) {
		return "", false
	}
	str := data[i+len(mid):]
	if len(str) == 0 || str[0] != '"' {
		return "", false
	}
	end := stringEnd(str, 0) // just past the text's closing quote
	if end < 0 || string(str[end:]) != "}}" {
		return "", false
	}
	body, plain := str[1:end-1], true
	for _, c := range body {
		if c < 0x20 || c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return string(body), true
	}
	var text string
	if json.Unmarshal(str[:end], &text) != nil || !utf8.Valid(body) {
		// A bad escape; or bytes encoding/json would replace, which the
		// general path handles the same way: leave both to it.
		return "", false
	}
	return text, true
}

// anthropicEncoder writes neutral events as a Messages event stream: one
// message_start, content blocks with contiguous indexes (the official SDK's
// accumulator requires them), then message_delta and message_stop.
type anthropicEncoder struct {
	id, model string
	block     int  // index of the open block, or the next one
	open      bool // a block is open
	openTool  int  // tool ordinal of the open block, -1 for text or thinking
	thinking  bool // the open block is a thinking block
}

func newAnthropicEncoder(id, model string) *anthropicEncoder {
	return &anthropicEncoder{id: id, model: model, openTool: -1}
}

func (e *anthropicEncoder) Start(dst []byte, inputTokens int64) []byte {
	data := `{"type":"message_start","message":{"id":` + strconv.Quote(e.id) + `,"type":"message","role":"assistant","model":` +
		jsonString(e.model) + `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":` +
		strconv.FormatInt(inputTokens, 10) + `,"output_tokens":1}}}`
	return sse.AppendEvent(dst, "message_start", []byte(data))
}

func (e *anthropicEncoder) closeBlock(dst []byte) []byte {
	if !e.open {
		return dst
	}
	dst = sse.AppendEvent(dst, "content_block_stop", []byte(`{"type":"content_block_stop","index":`+strconv.Itoa(e.block)+`}`))
	e.open, e.openTool, e.thinking = false, -1, false
	e.block++
	return dst
}

func (e *anthropicEncoder) Text(dst []byte, text string) []byte {
	if e.open && (e.openTool >= 0 || e.thinking) {
		dst = e.closeBlock(dst)
	}
	if !e.open {
		dst = sse.AppendEvent(dst, "content_block_start", []byte(`{"type":"content_block_start","index":`+strconv.Itoa(e.block)+
			`,"content_block":{"type":"text","text":""}}`))
		e.open, e.openTool = true, -1
	}
	dst = append(dst, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	dst = strconv.AppendInt(dst, int64(e.block), 10)
	dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
	dst = appendJSONString(dst, text)
	return append(dst, "}}\n\n"...)
}

// Thinking appends extended thinking text, opening a thinking block.
func (e *anthropicEncoder) Thinking(dst []byte, text string) []byte {
	dst = e.openThinking(dst)
	return sse.AppendEvent(dst, "content_block_delta", []byte(`{"type":"content_block_delta","index":`+strconv.Itoa(e.block)+
		`,"delta":{"type":"thinking_delta","thinking":`+jsonString(text)+`}}`))
}

// Signature appends the signature of the open thinking block.
func (e *anthropicEncoder) Signature(dst []byte, sig string) []byte {
	dst = e.openThinking(dst)
	return sse.AppendEvent(dst, "content_block_delta", []byte(`{"type":"content_block_delta","index":`+strconv.Itoa(e.block)+
		`,"delta":{"type":"signature_delta","signature":`+jsonString(sig)+`}}`))
}

// RedactedThinking appends a whole redacted thinking block.
func (e *anthropicEncoder) RedactedThinking(dst []byte, data string) []byte {
	dst = e.closeBlock(dst)
	dst = sse.AppendEvent(dst, "content_block_start", []byte(`{"type":"content_block_start","index":`+strconv.Itoa(e.block)+
		`,"content_block":{"type":"redacted_thinking","data":`+jsonString(data)+`}}`))
	e.open = true
	return e.closeBlock(dst)
}

func (e *anthropicEncoder) openThinking(dst []byte) []byte {
	if e.open && e.thinking {
		return dst
	}
	dst = e.closeBlock(dst)
	e.open, e.thinking = true, true
	return sse.AppendEvent(dst, "content_block_start", []byte(`{"type":"content_block_start","index":`+strconv.Itoa(e.block)+
		`,"content_block":{"type":"thinking","thinking":"","signature":""}}`))
}

func (e *anthropicEncoder) ToolStart(dst []byte, index int, id, name string) []byte {
	dst = e.closeBlock(dst)
	e.open, e.openTool = true, index
	return sse.AppendEvent(dst, "content_block_start", []byte(`{"type":"content_block_start","index":`+strconv.Itoa(e.block)+
		`,"content_block":{"type":"tool_use","id":`+jsonString(id)+`,"name":`+jsonString(name)+`,"input":{}}}`))
}

func (e *anthropicEncoder) ToolArgs(dst []byte, _ int, args string) []byte {
	return sse.AppendEvent(dst, "content_block_delta", []byte(`{"type":"content_block_delta","index":`+strconv.Itoa(e.block)+
		`,"delta":{"type":"input_json_delta","partial_json":`+jsonString(args)+`}}`))
}

func (e *anthropicEncoder) Finish(dst []byte, finish string, u gw.Usage, _ bool) []byte {
	dst = e.closeBlock(dst)
	au := anUsageOf(u)
	data := `{"type":"message_delta","delta":{"stop_reason":` + jsonString(finishToAnthropic(finish)) +
		`,"stop_sequence":null},"usage":{"input_tokens":` + strconv.FormatInt(au.InputTokens, 10) +
		`,"cache_creation_input_tokens":` + strconv.FormatInt(au.CacheCreationInputTokens, 10) +
		`,"cache_read_input_tokens":` + strconv.FormatInt(au.CacheReadInputTokens, 10) +
		`,"output_tokens":` + strconv.FormatInt(au.OutputTokens, 10) + `}}`
	dst = sse.AppendEvent(dst, "message_delta", []byte(data))
	return sse.AppendEvent(dst, "message_stop", []byte(`{"type":"message_stop"}`))
}

func (e *anthropicEncoder) Error(dst []byte, ce *ClientError) []byte {
	return sse.AppendEvent(dst, "error", StreamErrorData(Anthropic, ce))
}

// ParseCountTokens reads a POST /v1/messages/count_tokens body: a Messages
// request without max_tokens.
func ParseCountTokens(body []byte) (*Request, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, invalid("", "request body is not a valid token counting request: %v", jsonErr(err))
	}
	if _, ok := top["max_tokens"]; !ok {
		top["max_tokens"] = json.RawMessage("1")
	}
	withMax, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	return parseAnthropicRequest(withMax)
}

// WithModel returns body with its top-level model replaced.
func WithModel(body []byte, model string) ([]byte, error) {
	out, ok := replaceModel(body, model)
	if !ok {
		return nil, invalid("model", "model must be a string, given once")
	}
	return out, nil
}
