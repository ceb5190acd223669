package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/oncegate/oncegate/internal/jsonenc"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// OpenAI Chat Completions wire types (platform.openai.com/docs/api-reference/chat).

type oaRequest struct {
	Model               string          `json:"model"`
	Messages            []oaMessage     `json:"messages"`
	Tools               []oaTool        `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *oaStreamOpts   `json:"stream_options,omitempty"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format,omitempty"`
	N                 *int   `json:"n,omitempty"`
	User              string `json:"user,omitempty"`
	SafetyIdentifier  string `json:"safety_identifier,omitempty"`
	ParallelToolCalls *bool  `json:"parallel_tool_calls,omitempty"`
}

type oaStreamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Prefix     bool            `json:"prefix,omitempty"`
}

type oaPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	} `json:"image_url,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

func (u *oaUsage) usage() gw.Usage {
	out := gw.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

func oaUsageOf(u gw.Usage) *oaUsage {
	return &oaUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens,
		PromptTokensDetails: &struct {
			CachedTokens int64 `json:"cached_tokens"`
		}{u.CachedTokens}}
}

// MaxChoices is the most choices (OpenAI's n) one request may ask for.
const MaxChoices = 8

// parseOpenAIRequest reads a Chat Completions request body.
func parseOpenAIRequest(body []byte) (*Request, error) {
	var in oaRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("", "request body is not a valid chat completion request: %v", jsonErr(err))
	}
	if in.Model == "" {
		return nil, invalid("model", "model is required")
	}
	if len(in.Messages) == 0 {
		return nil, invalid("messages", "messages must not be empty")
	}
	if in.N != nil && (*in.N < 1 || *in.N > MaxChoices) {
		return nil, invalid("n", "n must be between 1 and %d, found %d", MaxChoices, *in.N)
	}
	r := &Request{Model: in.Model, Temperature: in.Temperature, TopP: in.TopP, Stream: in.Stream, User: in.User,
		ParallelToolCalls: in.ParallelToolCalls, Choices: 1}
	if in.N != nil {
		r.Choices = *in.N
	}
	if in.SafetyIdentifier != "" {
		r.User = in.SafetyIdentifier
	}
	if in.StreamOptions != nil {
		r.IncludeUsage = in.StreamOptions.IncludeUsage
	}
	if in.MaxCompletionTokens != nil {
		r.MaxTokens = *in.MaxCompletionTokens
	} else if in.MaxTokens != nil {
		r.MaxTokens = *in.MaxTokens
	}
	if r.MaxTokens < 0 {
		return nil, invalid("max_tokens", "must not be negative")
	}
	if in.ResponseFormat != nil && in.ResponseFormat.Type == "json_schema" {
		r.JSONSchema = true
	}
	var err error
	if r.Stop, err = stopList(in.Stop); err != nil {
		return nil, err
	}
	var system []string
	for i, m := range in.Messages {
		param := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "developer":
			text, _, err := oaContent(m.Content, param)
			if err != nil {
				return nil, err
			}
			system = append(system, text)
		case RoleUser, RoleAssistant, RoleTool:
			msg, err := oaMessageIR(m, param)
			if err != nil {
				return nil, err
			}
			r.Messages = append(r.Messages, msg)
		default:
			return nil, invalid(param+".role", "unknown role %q", m.Role)
		}
	}
	r.System = strings.Join(system, "\n\n")
	for i, t := range in.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, invalid(fmt.Sprintf("tools[%d]", i), "only function tools with a name are supported")
		}
		r.Tools = append(r.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	if r.ToolChoice, err = oaToolChoice(in.ToolChoice); err != nil {
		return nil, err
	}
	return r, nil
}

func oaMessageIR(m oaMessage, param string) (Message, error) {
	text, parts, err := oaContent(m.Content, param)
	if err != nil {
		return Message{}, err
	}
	msg := Message{Role: m.Role, Parts: parts, ToolCallID: m.ToolCallID}
	if parts == nil && text != "" {
		msg.Parts = []Part{{Type: PartText, Text: text}}
	}
	if m.Role == RoleTool && m.ToolCallID == "" {
		return Message{}, invalid(param+".tool_call_id", "a tool message needs tool_call_id")
	}
	for _, c := range m.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return msg, nil
}

// oaContent reads message content: a string, an array of parts, or null.
func oaContent(raw json.RawMessage, param string) (string, []Part, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return "", nil, invalid(param+".content", "content must be a string or an array of parts")
	}
	var parts []Part
	for i, item := range items {
		var p oaPart
		if err := json.Unmarshal(item, &p); err != nil {
			return "", nil, invalid(fmt.Sprintf("%s.content[%d]", param, i), "malformed content part")
		}
		switch p.Type {
		case "text":
			parts = append(parts, Part{Type: PartText, Text: p.Text, Raw: item})
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return "", nil, invalid(fmt.Sprintf("%s.content[%d].image_url", param, i), "image_url.url is required")
			}
			parts = append(parts, imagePart(p.ImageURL.URL, item))
		case "input_audio", "file":
			parts = append(parts, Part{Type: PartAudio, Raw: item})
		default:
			return "", nil, invalid(fmt.Sprintf("%s.content[%d].type", param, i), "unsupported content part type %q", p.Type)
		}
	}
	return "", parts, nil
}

// imagePart splits a data: URL into media type and base64 data, so that
// it can become an Anthropic base64 source.
func imagePart(url string, raw json.RawMessage) Part {
	p := Part{Type: PartImage, ImageURL: url, Raw: raw}
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok && strings.HasSuffix(meta, ";base64") {
			p.MediaType, p.Data = strings.TrimSuffix(meta, ";base64"), data
		}
	}
	return p
}

func stopList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("stop", "stop must be a string or an array of strings")
	}
	return many, nil
}

func oaToolChoice(raw json.RawMessage) (*ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case ToolAuto, ToolNone, ToolRequired:
			return &ToolChoice{Mode: mode}, nil
		}
		return nil, invalid("tool_choice", "unknown tool_choice %q", mode)
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Function.Name == "" {
		return nil, invalid("tool_choice", "tool_choice must be auto, none, required or a named function")
	}
	return &ToolChoice{Mode: ToolNamed, Name: named.Function.Name}, nil
}

// buildOpenAIRequest writes a neutral request as a Chat Completions body.
func buildOpenAIRequest(r *Request, model string, stream bool) ([]byte, error) {
	out := oaRequest{Model: model, Temperature: r.Temperature, TopP: r.TopP, Stream: stream, User: r.User}
	if r.MaxTokens > 0 {
		out.MaxTokens = &r.MaxTokens
	}
	if stream {
		out.StreamOptions = &oaStreamOpts{IncludeUsage: true}
	}
	if len(r.Stop) > 0 {
		out.Stop, _ = json.Marshal(r.Stop)
	}
	if r.System != "" {
		content, _ := json.Marshal(r.System)
		out.Messages = append(out.Messages, oaMessage{Role: "system", Content: content})
	}
	for _, m := range r.Messages {
		out.Messages = append(out.Messages, oaMessageOf(m))
	}
	for _, t := range r.Tools {
		var ot oaTool
		ot.Type = "function"
		ot.Function.Name, ot.Function.Description, ot.Function.Parameters = t.Name, t.Description, t.Parameters
		out.Tools = append(out.Tools, ot)
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Mode {
		case ToolNamed:
			out.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			out.ToolChoice, _ = json.Marshal(tc.Mode)
		}
	}
	if p := r.ParallelToolCalls; p != nil && !*p && len(r.Tools) > 0 {
		out.ParallelToolCalls = p // only with tools: OpenAI refuses it without
	}
	return json.Marshal(out)
}

func oaMessageOf(m Message) oaMessage {
	om := oaMessage{Role: m.Role, ToolCallID: m.ToolCallID}
	simple := true
	for _, p := range m.Parts {
		simple = simple && p.Type == PartText
	}
	switch {
	case len(m.Parts) == 0 && m.Role == RoleAssistant:
		om.Content = json.RawMessage("null")
	case simple || m.Role != RoleUser:
		om.Content, _ = json.Marshal(m.Text())
	default:
		var parts []any
		for _, p := range m.Parts {
			switch p.Type {
			case PartText:
				parts = append(parts, map[string]string{"type": "text", "text": p.Text})
			case PartImage:
				url := p.ImageURL
				if url == "" {
					url = "data:" + p.MediaType + ";base64," + p.Data
				}
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": url}})
			}
		}
		om.Content, _ = json.Marshal(parts)
	}
	for _, c := range m.ToolCalls {
		var tc oaToolCall
		tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = c.ID, "function", c.Name, c.Arguments
		om.ToolCalls = append(om.ToolCalls, tc)
	}
	return om
}

type oaResponse struct {
	ID                string     `json:"id"`
	Object            string     `json:"object"`
	Created           int64      `json:"created"`
	Model             string     `json:"model"`
	Choices           []oaChoice `json:"choices"`
	Usage             *oaUsage   `json:"usage,omitempty"`
	SystemFingerprint string     `json:"system_fingerprint,omitempty"`
}

type oaChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role      string       `json:"role"`
		Content   *string      `json:"content"`
		Refusal   *string      `json:"refusal"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	} `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// decodeOpenAIResponse reads a Chat Completions response body.
func decodeOpenAIResponse(body []byte) (*Response, error) {
	var in oaResponse
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("chat completion body: %w", err)
	}
	if len(in.Choices) == 0 {
		return nil, fmt.Errorf("chat completion body has no choices")
	}
	c := in.Choices[0]
	r := &Response{ID: in.ID, Model: in.Model, Created: in.Created, Finish: c.FinishReason}
	if c.Message.Content != nil {
		r.Text = *c.Message.Content
	}
	if c.Message.Refusal != nil {
		r.Refusal = *c.Message.Refusal
	}
	for _, tc := range c.Message.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if in.Usage != nil {
		r.Usage = in.Usage.usage()
	}
	return r, nil
}

// encodeOpenAIResponse writes a neutral response as a Chat Completions
// body: choice 0, then each of r.Others with its index.
func encodeOpenAIResponse(r *Response, id string) []byte {
	out := oaResponse{ID: id, Object: "chat.completion", Created: r.Created, Model: r.Model, Usage: oaUsageOf(r.Usage)}
	out.Choices = make([]oaChoice, 0, 1+len(r.Others))
	out.Choices = append(out.Choices, oaChoiceOf(0, Choice{Text: r.Text, Refusal: r.Refusal, ToolCalls: r.ToolCalls, Finish: r.Finish}))
	for i, c := range r.Others {
		out.Choices = append(out.Choices, oaChoiceOf(i+1, c))
	}
	b, _ := json.Marshal(out)
	return b
}

// oaChoiceOf writes one choice of a Chat Completions body.
func oaChoiceOf(index int, ch Choice) oaChoice {
	c := oaChoice{Index: index}
	c.Message.Role = "assistant"
	if ch.Refusal != "" {
		refusal := ch.Refusal
		c.Message.Refusal = &refusal
	}
	if ch.Text != "" || len(ch.ToolCalls) == 0 && ch.Refusal == "" {
		text := ch.Text
		c.Message.Content = &text
	}
	for _, tc := range ch.ToolCalls {
		var t oaToolCall
		t.ID, t.Type, t.Function.Name, t.Function.Arguments = tc.ID, "function", tc.Name, tc.Arguments
		c.Message.ToolCalls = append(c.Message.ToolCalls, t)
	}
	c.Logprobs = json.RawMessage("null")
	c.FinishReason = ch.Finish
	return c
}

// openAIDecoder turns Chat Completions chunks into neutral events.
type openAIDecoder struct {
	started bool
}

type oaChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string       `json:"role"`
			Content   *string      `json:"content"`
			Refusal   *string      `json:"refusal"`
			ToolCalls []oaToolCall `json:"tool_calls"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaUsage        `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (d *openAIDecoder) Decode(ev sse.Event, out []Event) ([]Event, error) {
	if string(ev.Data) == "[DONE]" {
		return append(out, Event{Kind: EvDone}), nil
	}
	if evs, ok := scanChunk(ev.Data, d.started, out); ok {
		d.started = true
		return evs, nil
	}
	return d.decodeFull(ev.Data, out)
}

// decodeFull reads a chunk with encoding/json: every chunk scanChunk
// does not vouch for.
func (d *openAIDecoder) decodeFull(data []byte, out []Event) ([]Event, error) {
	var c oaChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return out, fmt.Errorf("malformed chunk: %w", err)
	}
	return d.decodeChunk(&c, data, out)
}

// decodeChunk turns a fully decoded chunk into events.
func (d *openAIDecoder) decodeChunk(c *oaChunk, data []byte, out []Event) ([]Event, error) {
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return append(out, Event{Kind: EvError, Err: ParseError(0, data)}), nil
	}
	if !d.started {
		d.started = true
		out = append(out, Event{Kind: EvStart, ID: c.ID, Model: c.Model})
	}
	for _, ch := range c.Choices {
		first := len(out)
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			ev := Event{Kind: EvText, Text: *ch.Delta.Content}
			if len(ch.Logprobs) > 0 && string(ch.Logprobs) != "null" {
				// Relayed as they came, on one line: SSE data may not
				// hold a newline.
				var lp bytes.Buffer
				if json.Compact(&lp, ch.Logprobs) == nil {
					ev.Logprobs = lp.Bytes()
				}
			}
			out = append(out, ev)
		}
		if ch.Delta.Refusal != nil && *ch.Delta.Refusal != "" {
			out = append(out, Event{Kind: EvRefusal, Text: *ch.Delta.Refusal})
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := 0
			if tc.Index != nil {
				idx = *tc.Index
			}
			if tc.ID != "" || tc.Function.Name != "" {
				out = append(out, Event{Kind: EvToolStart, ToolIndex: idx, ToolID: tc.ID, ToolName: tc.Function.Name})
			}
			if tc.Function.Arguments != "" {
				out = append(out, Event{Kind: EvToolArgs, ToolIndex: idx, Args: tc.Function.Arguments})
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			out = append(out, Event{Kind: EvFinish, Finish: *ch.FinishReason})
		}
		for i := first; i < len(out); i++ {
			out[i].Choice = ch.Index // several choices: each event names its own (n)
		}
	}
	if c.Usage != nil {
		out = append(out, Event{Kind: EvUsage, Usage: c.Usage.usage()})
	}
	return out, nil
}

// openAIEncoder writes neutral events as Chat Completions chunks with one
// stable id, created time and model for the whole stream, whichever
// attempts produced them (the official SDK's accumulator rejects a chunk
// whose id changes).
type openAIEncoder struct {
	id      string
	created int64
	prefix  []byte // `{"id":…,"object":…,"created":…,"model":…,`
	choice  int    // the choice the frames belong to (SetChoice)
}

// open is a choice's opening, up to its delta: `{"index":N,`.
func (e *openAIEncoder) open() string {
	if e.choice == 0 {
		return `{"index":0,`
	}
	return `{"index":` + strconv.Itoa(e.choice) + `,`
}

// SetChoice makes the frames from now on belong to choice i
// (ChoiceEncoder).
func (e *openAIEncoder) SetChoice(i int) { e.choice = i }

// FinishChoice ends the current choice with its finish reason
// (ChoiceEncoder).
func (e *openAIEncoder) FinishChoice(dst []byte, finish string) []byte {
	return e.chunk(dst, e.open()+`"delta":{},"logprobs":null,"finish_reason":`+jsonString(finish)+`}`)
}

func newOpenAIEncoder(id string, created int64, model string) *openAIEncoder {
	e := &openAIEncoder{id: id, created: created}
	e.SetModel(model)
	return e
}

// SetModel makes the chunks from now on name model.
func (e *openAIEncoder) SetModel(model string) {
	e.prefix = []byte(`{"id":` + strconv.Quote(e.id) + `,"object":"chat.completion.chunk","created":` + strconv.FormatInt(e.created, 10) +
		`,"model":` + jsonString(model) + `,`)
}

// chunk appends one data frame; its JSON is one line, so it is written
// straight into dst.
func (e *openAIEncoder) chunk(dst []byte, choice string) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, e.prefix...)
	dst = append(dst, `"choices":[`...)
	dst = append(dst, choice...)
	return append(dst, "]}\n\n"...)
}

func (e *openAIEncoder) Start(dst []byte, _ int64) []byte {
	return e.chunk(dst, e.open()+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`)
}

func (e *openAIEncoder) Text(dst []byte, text string) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, e.prefix...)
	dst = append(dst, `"choices":[`...)
	dst = append(dst, e.open()...)
	dst = append(dst, `"delta":{"content":`...)
	dst = appendJSONString(dst, text)
	return append(dst, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"...)
}

// Refusal appends a refusal delta.
func (e *openAIEncoder) Refusal(dst []byte, text string) []byte {
	return e.chunk(dst, e.open()+`"delta":{"refusal":`+jsonString(text)+`},"logprobs":null,"finish_reason":null}`)
}

// TextLogprobs appends a text delta with its log probabilities.
func (e *openAIEncoder) TextLogprobs(dst []byte, text string, logprobs json.RawMessage) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, e.prefix...)
	dst = append(dst, `"choices":[`...)
	dst = append(dst, e.open()...)
	dst = append(dst, `"delta":{"content":`...)
	dst = appendJSONString(dst, text)
	dst = append(dst, `},"logprobs":`...)
	dst = append(dst, logprobs...)
	return append(dst, ",\"finish_reason\":null}]}\n\n"...)
}

func (e *openAIEncoder) ToolStart(dst []byte, index int, id, name string) []byte {
	return e.chunk(dst, e.open()+`"delta":{"tool_calls":[{"index":`+strconv.Itoa(index)+`,"id":`+jsonString(id)+
		`,"type":"function","function":{"name":`+jsonString(name)+`,"arguments":""}}]},"logprobs":null,"finish_reason":null}`)
}

func (e *openAIEncoder) ToolArgs(dst []byte, index int, args string) []byte {
	return e.chunk(dst, e.open()+`"delta":{"tool_calls":[{"index":`+strconv.Itoa(index)+`,"function":{"arguments":`+
		jsonString(args)+`}}]},"logprobs":null,"finish_reason":null}`)
}

func (e *openAIEncoder) Finish(dst []byte, finish string, u gw.Usage, includeUsage bool) []byte {
	e.choice = 0
	dst = e.chunk(dst, e.open()+`"delta":{},"logprobs":null,"finish_reason":`+jsonString(finish)+`}`)
	if includeUsage {
		usage, _ := json.Marshal(oaUsageOf(u))
		data := append(append(append([]byte(nil), e.prefix...), `"choices":[],"usage":`...), usage...)
		dst = sse.AppendEvent(dst, "", append(data, '}'))
	}
	return sse.AppendEvent(dst, "", []byte("[DONE]"))
}

func (e *openAIEncoder) Error(dst []byte, ce *ClientError) []byte {
	return sse.AppendEvent(dst, "", StreamErrorData(OpenAI, ce))
}

// jsonString quotes s as a JSON string (see appendJSONString).
func jsonString(s string) string { return string(appendJSONString(nil, s)) }

// appendJSONString appends s quoted as a JSON string. Unlike encoding/json
// it leaves <, > and & alone, as the providers' own streams do; invalid
// UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte { return jsonenc.AppendString(b, s, jsonenc.Wire) }

func jsonErr(err error) string {
	if se, ok := err.(*json.SyntaxError); ok {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("field %q has the wrong type (%s)", te.Field, te.Value)
	}
	return err.Error()
}
