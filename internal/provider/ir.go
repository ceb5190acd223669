// Package provider holds the wire formats of the APIs oncegate speaks —
// OpenAI Chat Completions and Anthropic Messages — and the translators
// between them. Every format is read into, and written from, one neutral
// representation (Request, Response, Event), so a request on either API can
// be served by a route of either provider and the caller always gets its own
// protocol back. Same-protocol requests are patched rather than rebuilt, so
// fields oncegate does not model still reach the provider.
//
// Translators never mutate their input: the retry engine runs them again on
// every attempt. classify.go holds the error rules the OpenAI and
// Anthropic protocols share; seam.go is the interface each provider type
// implements (docs/providers.md), in its own package.
package provider

import (
	"encoding/json"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/tokens"
)

// Protocol is a client-facing or upstream wire protocol.
type Protocol string

// The protocols.
const (
	OpenAI    Protocol = "openai"
	Anthropic Protocol = "anthropic"
)

// Operation is the receipt's name for a protocol's endpoint (docs/architecture.md).
func (p Protocol) Operation() string {
	switch p {
	case Anthropic:
		return "messages"
	case Responses:
		return "responses"
	case Embeddings:
		return "embeddings"
	}
	return "chat.completions"
}

// Request is a chat request in neutral form.
type Request struct {
	Model        string
	System       string
	Messages     []Message
	Tools        []Tool
	ToolChoice   *ToolChoice
	MaxTokens    int64 // 0: not set
	Temperature  *float64
	TopP         *float64
	Stop         []string
	Stream       bool
	IncludeUsage bool // OpenAI stream_options.include_usage
	JSONSchema   bool // a strict JSON schema response format was asked for
	User         string
	// Thinking: the client asked for extended thinking (Anthropic's
	// thinking, any type but disabled). A thinking answer cannot be
	// continued by prefill.
	Thinking bool
	// Choices is how many answers an OpenAI client asked for (n, 1 to
	// MaxChoices); 0 or 1: one. A route of the client's own protocol
	// carries it, and a Gemini route as candidateCount
	// (docs/translation.md).
	Choices int
	// ParallelToolCalls is false when the client forbade more than one
	// tool call per turn; nil: the provider's default (allowed).
	ParallelToolCalls *bool
}

// Roles of a Message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn. A tool result has role "tool" and ToolCallID.
type Message struct {
	Role       string
	Parts      []Part
	ToolCalls  []ToolCall
	ToolCallID string
	IsError    bool
}

// Text returns the concatenated text parts.
func (m *Message) Text() string {
	if len(m.Parts) == 1 && m.Parts[0].Type == PartText {
		return m.Parts[0].Text
	}
	var s string
	for _, p := range m.Parts {
		if p.Type == PartText {
			s += p.Text
		}
	}
	return s
}

// Part types.
const (
	PartText  = "text"
	PartImage = "image"
	PartAudio = "audio"
)

// Part is a piece of message content. An image is either a URL (http(s)
// or data:) or base64 Data with its MediaType.
type Part struct {
	Type      string
	Text      string
	ImageURL  string
	MediaType string
	Data      string
	Raw       json.RawMessage // the original part, for same-protocol use
}

// ToolCall is a model's request to call a tool; Arguments is JSON text.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Tool is a function the model may call; Parameters is a JSON Schema.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ToolChoice modes.
const (
	ToolAuto     = "auto"
	ToolNone     = "none"
	ToolRequired = "required"
	ToolNamed    = "tool"
)

// ToolChoice constrains tool use.
type ToolChoice struct {
	Mode string
	Name string
}

// Finish reasons, in OpenAI's vocabulary.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishToolCalls     = "tool_calls"
	FinishContentFilter = "content_filter"
)

// Response is a complete (non-streamed) answer in neutral form.
type Response struct {
	ID      string
	Model   string
	Created int64
	Text    string
	// Refusal is the model's refusal to answer (OpenAI's message.refusal),
	// given instead of Text.
	Refusal   string
	ToolCalls []ToolCall
	Finish    string
	Usage     gw.Usage
	// Others are the choices after the first, when the request asked for
	// several (OpenAI's n): Others[i] is choice i+1. The fields above are
	// choice 0; Usage counts every choice.
	Others []Choice
}

// Choice is one choice of an answer of several past the first
// (Response.Others).
type Choice struct {
	Text      string
	Refusal   string
	ToolCalls []ToolCall
	Finish    string
}

// EventKind classifies a stream event.
type EventKind uint8

// The stream event kinds. Text and the two tool kinds are visible output
// (docs/architecture.md); the others are not.
const (
	EvStart EventKind = iota + 1
	EvText
	EvToolStart
	EvToolArgs
	EvFinish
	EvUsage
	EvError
	EvDone
	// EvThinking is extended thinking text (Text); EvSignature the
	// signature that closes a thinking block (Text); EvRedactedThinking a
	// redacted thinking block (Text holds its data). Thinking is visible
	// output: a client renders it.
	EvThinking
	EvSignature
	EvRedactedThinking
	// EvRefusal is the model's refusal to answer, as text (OpenAI's
	// delta.refusal): visible output.
	EvRefusal
)

// Event is one stream event in neutral form.
type Event struct {
	Kind  EventKind
	ID    string // EvStart
	Model string // EvStart
	Text  string // EvText, EvThinking, EvSignature, EvRedactedThinking
	// Logprobs are the log probabilities of an EvText delta, as the
	// provider sent them (OpenAI's choice.logprobs); nil: none.
	Logprobs  json.RawMessage
	ToolIndex int // EvToolStart, EvToolArgs: the tool call's ordinal
	ToolID    string
	ToolName  string
	Args      string
	Finish    string   // EvFinish
	Usage     gw.Usage // EvUsage: cumulative for the attempt
	Err       *UpstreamError
	// Synthetic marks an event the decoder wrote itself rather than
	// relayed from the model: the refusal standing for an answer Gemini
	// withheld without a word. It is shown to the client but was not
	// generated, so it is never counted as output (docs/streaming.md).
	Synthetic bool
	// Choice is the index of the choice the event belongs to, when the
	// request asked for several (OpenAI's n); 0 otherwise.
	Choice int
	// AllChoices marks an EvFinish that ends every choice at once: the
	// prompt itself was refused before any choice began (Gemini's
	// promptFeedback block), so choice 0 holds the refusal and no other
	// choice has anything to show.
	AllChoices bool
}

// Visible reports whether e is output a client could render.
func (e *Event) Visible() bool {
	return (e.Kind == EvText || e.Kind == EvThinking || e.Kind == EvRefusal) && e.Text != "" || e.Kind == EvToolStart ||
		e.Kind == EvToolArgs && e.Args != "" || e.Kind == EvRedactedThinking
}

// PromptTokens estimates a request's prompt tokens with the shared
// estimator (package tokens).
func PromptTokens(r *Request) int64 {
	n := int64(tokens.PerRequest)
	if r.System != "" {
		n += tokens.PerMessage + tokens.Text(r.System)
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		n += tokens.PerMessage
		for _, p := range m.Parts {
			switch p.Type {
			case PartText:
				n += tokens.Text(p.Text)
			case PartImage, PartAudio:
				n += tokens.PerImage
			}
		}
		for _, c := range m.ToolCalls {
			n += tokens.Text(c.Name) + tokens.Text(c.Arguments)
		}
	}
	for _, t := range r.Tools {
		n += tokens.Text(t.Name) + tokens.Text(t.Description) + tokens.Text(string(t.Parameters))
	}
	return n
}

// Needs is what a request requires of a route (docs/configuration.md).
type Needs struct {
	Images, Audio, Tools, JSONSchema, Stream bool
}

// NeedsOf inspects a request.
func NeedsOf(r *Request) Needs {
	n := Needs{Tools: len(r.Tools) > 0, JSONSchema: r.JSONSchema, Stream: r.Stream}
	for i := range r.Messages {
		for _, p := range r.Messages[i].Parts {
			n.Images = n.Images || p.Type == PartImage
			n.Audio = n.Audio || p.Type == PartAudio
		}
		n.Tools = n.Tools || len(r.Messages[i].ToolCalls) > 0 || r.Messages[i].Role == RoleTool
	}
	return n
}

// WithAssistantPrefix returns a copy of r whose last message is an
// assistant message ending in prefix: appended to a trailing assistant
// message (the client's own prefill), or added as a new one. r is not
// modified.
func WithAssistantPrefix(r *Request, prefix string) *Request {
	c := *r
	c.Messages = append([]Message(nil), r.Messages...)
	if n := len(c.Messages); n > 0 && c.Messages[n-1].Role == RoleAssistant && len(c.Messages[n-1].ToolCalls) == 0 {
		last := c.Messages[n-1]
		last.Parts = []Part{{Type: PartText, Text: last.Text() + prefix}}
		c.Messages[n-1] = last
		return &c
	}
	c.Messages = append(c.Messages, Message{Role: RoleAssistant, Parts: []Part{{Type: PartText, Text: prefix}}})
	return &c
}
