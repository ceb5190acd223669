package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// ClientRequest is a parsed client request. It is immutable once parsed.
type ClientRequest struct {
	Protocol Protocol
	Body     []byte
	IR       *Request
	// PromptTokens is the estimated prompt (package tokens).
	PromptTokens int64
	// NativeOnly lists the fields only a route of the client's own
	// protocol can serve (see Fields); routes of the other are ineligible.
	NativeOnly []string
	// DropParams is the body's own drop_params (LiteLLM clients send it),
	// nil when it has none; Body no longer holds it, so it never reaches
	// a provider (docs/translation.md).
	DropParams *bool
	// Tags are the body's metadata.tags (LiteLLM clients send them), not
	// yet checked (see Tags); Body no longer holds them (docs/spend.md).
	Tags []string
}

// ParseRequest reads a client request body of protocol p. A malformed
// request is an *InvalidRequestError naming the field.
func ParseRequest(p Protocol, body []byte) (*ClientRequest, error) {
	body, tags, err := takeTags(body)
	if err != nil {
		return nil, err
	}
	var ir *Request
	switch p {
	case OpenAI:
		ir, err = parseOpenAIRequest(body)
	case Anthropic:
		ir, err = parseAnthropicRequest(body)
	case Embeddings:
		if ir, err = parseEmbeddingsRequest(body); err != nil {
			return nil, err
		}
		return &ClientRequest{Protocol: p, Body: body, IR: ir, PromptTokens: PromptTokens(ir), Tags: tags}, nil
	default:
		return nil, fmt.Errorf("unknown protocol %q", p)
	}
	if err != nil {
		return nil, err
	}
	body, drop, err := takeDropParams(body)
	if err != nil {
		return nil, err
	}
	return &ClientRequest{Protocol: p, Body: body, IR: ir, PromptTokens: PromptTokens(ir), NativeOnly: nativeOnly(p, body), DropParams: drop, Tags: tags}, nil
}

// takeDropParams takes a body's top-level drop_params out of it: the
// body without the member, and its value (nil when there is none). A
// value that is not true, false or null is an invalid request naming it.
func takeDropParams(body []byte) ([]byte, *bool, error) {
	if !bytes.Contains(body, []byte(`drop_params`)) && !bytes.Contains(body, []byte(`\u`)) {
		return body, nil, nil // only a \u escape could spell it otherwise
	}
	top, err := topLevelMembers(body)
	if err != nil {
		return body, nil, nil // the parser has accepted the body: not reached
	}
	raw, ok := top["drop_params"]
	if !ok {
		return body, nil, nil
	}
	var drop *bool
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		drop = new(bool)
		*drop = true
	case "false":
		drop = new(bool)
	case "null":
	default:
		return nil, nil, invalid("drop_params", "drop_params must be true or false, found %s", raw)
	}
	if out, ok := ReplaceMembers(body, MemberEdit{Key: "drop_params"}); ok {
		return out, drop, nil
	}
	delete(top, "drop_params")
	return encodeMembers(top), drop, nil
}

// Continuation styles a Target may use (docs/streaming.md); they mirror the
// route capability values.
const (
	ContinuePrefill  = "assistant_prefill"
	ContinuePrefix   = "prefix_flag"
	ContinueFinalMsg = "continue_final_message"
)

// Target is the route one attempt goes to.
type Target struct {
	Protocol        Protocol
	Model           string
	Stream          bool
	MaxOutputTokens int64
	Continuation    string
	// MaxTokens, when not 0, is the output limit the attempt is sent with,
	// whatever the client asked: what its cost reservation assumed.
	MaxTokens int64
	// Beta is the client's anthropic-beta header, which a route of the
	// Anthropic protocol passes on to an Anthropic client's request.
	Beta string
}

// Built is one attempt's upstream request body and its prompt estimate.
type Built struct {
	Body         []byte
	PromptTokens int64
}

// BuildRequest writes the upstream body for one attempt on t. A non-nil
// prefix asks the route to continue a partial answer (resume): the prefix
// becomes a trailing assistant message in the route's continuation style.
// in is never modified.
func BuildRequest(in *ClientRequest, t Target, prefix *string) (*Built, error) {
	ir := in.IR
	if prefix != nil {
		ir = WithAssistantPrefix(ir, *prefix)
	}
	if t.MaxTokens > 0 && ir.MaxTokens != t.MaxTokens {
		capped := *ir
		capped.MaxTokens = t.MaxTokens
		ir = &capped
	}
	var body []byte
	var err error
	switch {
	case in.Protocol == Embeddings:
		var ok bool
		if body, ok = replaceModel(in.Body, t.Model); !ok {
			err = fmt.Errorf("the request has no model to replace")
		}
	case in.Protocol == OpenAI && t.Protocol == OpenAI:
		body, err = patchOpenAI(in.Body, t, ir, prefix != nil, in.IR.MaxTokens)
	case in.Protocol == Anthropic && t.Protocol == Anthropic:
		body, err = patchAnthropic(in.Body, t, ir, prefix != nil)
	case t.Protocol == Anthropic:
		body, err = buildAnthropicRequest(ir, t.Model, t.Stream, t.MaxOutputTokens)
	default:
		body, err = buildOpenAIRequest(ir, t.Model, t.Stream)
		if err == nil && prefix != nil {
			body, err = markContinuation(body, t.Continuation)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("build %s request for %s: %w", t.Protocol, t.Model, err)
	}
	n := in.PromptTokens
	if prefix != nil || n == 0 { // the prompt grew, or in was not parsed by ParseRequest
		n = PromptTokens(ir)
	}
	return &Built{Body: body, PromptTokens: n}, nil
}

// patchOpenAI rewrites a client's Chat Completions body for a route: the
// model, streaming with usage, the output limit (clientMax is the one the
// client asked for), and a continuation. Every other field the
// client sent reaches the provider untouched: in place (rewriteOpenAI)
// unless it continues a partial answer.
func patchOpenAI(body []byte, t Target, ir *Request, cont bool, clientMax int64) ([]byte, error) {
	if !cont {
		if b, ok := rewriteOpenAI(body, t, ir.Stream, clientMax); ok {
			return b, nil
		}
	}
	return rebuildOpenAI(body, t, ir, cont, clientMax)
}

// rebuildOpenAI is patchOpenAI by splitting the body into a map of its
// members and encoding them again.
func rebuildOpenAI(body []byte, t Target, ir *Request, cont bool, clientMax int64) ([]byte, error) {
	sentLimit := t.MaxTokens == 0 || clientMax == t.MaxTokens
	if !t.Stream && !cont && !ir.Stream && sentLimit {
		if b, ok := replaceModel(body, t.Model); ok {
			return b, nil // the common case: only the model changes
		}
	}
	top, err := topLevelMembers(body)
	if err != nil {
		return nil, err
	}
	top["model"] = json.RawMessage(jsonString(t.Model))
	setStream(top, t.Stream, true)
	if t.MaxTokens > 0 {
		// The field the client used; max_tokens when it used neither (the
		// one every OpenAI-compatible server reads).
		field := "max_tokens"
		if _, ok := top["max_completion_tokens"]; ok {
			field = "max_completion_tokens"
			delete(top, "max_tokens")
		}
		top[field] = json.RawMessage(strconv.FormatInt(t.MaxTokens, 10))
	}
	if cont {
		last := ir.Messages[len(ir.Messages)-1]
		msgs, err := replaceTail(top["messages"], oaMessageOf(last))
		if err != nil {
			return nil, err
		}
		top["messages"] = msgs
		return markContinuation(encodeMembers(top), t.Continuation)
	}
	return encodeMembers(top), nil
}

// topLevelMembers splits a JSON object into its members, each value a
// slice of body (nothing is copied: a 4 MB prompt stays one 4 MB
// buffer). A body it cannot walk plainly — a key spelled with escapes or
// not valid UTF-8, a key twice — is decoded by encoding/json instead.
func topLevelMembers(body []byte) (map[string]json.RawMessage, error) {
	top := map[string]json.RawMessage{}
	i := skipSpace(body, 0)
	if i < len(body) && body[i] == '{' {
		for i = skipSpace(body, i+1); i < len(body) && body[i] == '"'; {
			kEnd := stringEnd(body, i)
			if kEnd < 0 {
				break
			}
			k := body[i+1 : kEnd-1]
			if bytes.IndexByte(k, '\\') >= 0 || !utf8.Valid(k) {
				break // encoding/json unescapes or repairs such a key
			}
			if _, twice := top[string(k)]; twice {
				break
			}
			j := skipSpace(body, kEnd)
			if j >= len(body) || body[j] != ':' {
				break
			}
			j = skipSpace(body, j+1)
			vEnd := valueEnd(body, j)
			if vEnd < 0 {
				break
			}
			top[string(k)] = json.RawMessage(body[j:vEnd:vEnd])
			i = skipSpace(body, vEnd)
			if i < len(body) && body[i] == '}' {
				if skipSpace(body, i+1) == len(body) {
					return top, nil
				}
				break
			}
			if i >= len(body) || body[i] != ',' {
				break
			}
			i = skipSpace(body, i+1)
		}
	}
	top = nil
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	return top, nil
}

// encodeMembers writes an object of raw members, keys sorted as
// encoding/json sorts a map's, in one buffer of the size it needs.
func encodeMembers(top map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(top))
	n := 2
	for k, v := range top {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	slices.Sort(keys)
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, k)
		out = append(out, ':')
		out = append(out, top[k]...)
	}
	return append(out, '}')
}

// replaceModel rewrites the value of a body's top-level "model" member
// without decoding the rest; ok is false when the body is not a plain
// object it can walk (the caller then rebuilds it).
func replaceModel(body []byte, model string) ([]byte, bool) {
	start, end, ok := topLevelValue(body, "model")
	if !ok || end-start < 2 || body[start] != '"' {
		return nil, false
	}
	out := make([]byte, 0, len(body)+len(model))
	out = append(out, body[:start]...)
	out = appendJSONString(out, model)
	return append(out, body[end:]...), true
}

// topLevelValue finds the byte span of a top-level member's value in a
// JSON object. It walks every member, skipping nested values by depth; a
// key that appears twice (or not at all) is not ok.
func topLevelValue(b []byte, key string) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i++
	found := false
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		kEnd := stringEnd(b, i)
		if kEnd < 0 {
			return 0, 0, false
		}
		k := b[i+1 : kEnd-1]
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		vEnd := valueEnd(b, i)
		if vEnd < 0 {
			return 0, 0, false
		}
		if string(k) == key { // a key spelled with escapes takes the slow path
			if found {
				return 0, 0, false
			}
			start, end, found = i, vEnd, true
		}
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == '}' {
			return start, end, found
		}
		if i >= len(b) || b[i] != ',' {
			return 0, 0, false
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i]: the
// first quote after it that an even number of backslashes precedes
// (found with bytes.IndexByte, a long prompt being most of a body).
func stringEnd(b []byte, i int) int {
	for j := i + 1; j <= len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		escaped := false
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			escaped = !escaped
		}
		if !escaped {
			return j + 1
		}
	}
	return -1
}

// valueEnd returns the index just past the value starting at b[i].
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j
}

// patchAnthropic rewrites a client's Messages body for a route: in place
// (rewriteAnthropic) unless it continues a partial answer.
func patchAnthropic(body []byte, t Target, ir *Request, cont bool) ([]byte, error) {
	if !cont {
		if b, ok := rewriteAnthropic(body, t); ok {
			return b, nil
		}
	}
	return rebuildAnthropic(body, t, ir, cont)
}

// rebuildAnthropic is patchAnthropic by splitting the body into a map of
// its members and encoding them again.
func rebuildAnthropic(body []byte, t Target, ir *Request, cont bool) ([]byte, error) {
	top, err := topLevelMembers(body)
	if err != nil {
		return nil, err
	}
	top["model"] = json.RawMessage(jsonString(t.Model))
	setStream(top, t.Stream, false)
	if t.MaxTokens > 0 {
		top["max_tokens"] = json.RawMessage(strconv.FormatInt(t.MaxTokens, 10))
	}
	if cont {
		last := ir.Messages[len(ir.Messages)-1]
		content, _ := json.Marshal(last.Text())
		msgs, err := replaceTail(top["messages"], anMessage{Role: RoleAssistant, Content: content})
		if err != nil {
			return nil, err
		}
		top["messages"] = msgs
	}
	return json.Marshal(top)
}

func setStream(top map[string]json.RawMessage, stream, usageOption bool) {
	if !stream {
		delete(top, "stream")
		delete(top, "stream_options")
		return
	}
	top["stream"] = json.RawMessage("true")
	if !usageOption {
		return
	}
	// Usage is how attempts are billed: always ask for it upstream; the
	// client sees a usage chunk only if it asked.
	opts := map[string]json.RawMessage{}
	if json.Unmarshal(top["stream_options"], &opts) != nil || opts == nil { // absent, or null
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	top["stream_options"], _ = json.Marshal(opts)
}

// replaceTail puts msg at the end of a raw messages array: it replaces a
// trailing assistant message without tool calls (the client's own
// prefill, which msg already extends) or is appended.
func replaceTail(raw json.RawMessage, msg any) (json.RawMessage, error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, err
	}
	if n := len(msgs); n > 0 {
		var last struct {
			Role      string          `json:"role"`
			ToolCalls json.RawMessage `json:"tool_calls"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(msgs[n-1], &last) == nil && last.Role == RoleAssistant && len(last.ToolCalls) == 0 && !hasToolUse(last.Content) {
			msgs = msgs[:n-1]
		}
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(append(msgs, b))
}

func hasToolUse(content json.RawMessage) bool {
	return strings.Contains(string(content), `"tool_use"`)
}

// markContinuation applies an OpenAI-compatible server's continuation flag
// to a body whose last message is the assistant prefix: "prefix": true on
// that message (DeepSeek, Mistral) or vLLM's continue_final_message.
// assistant_prefill needs no flag.
func markContinuation(body []byte, style string) ([]byte, error) {
	switch style {
	case ContinuePrefix:
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			return nil, err
		}
		var msgs []map[string]json.RawMessage
		if err := json.Unmarshal(top["messages"], &msgs); err != nil || len(msgs) == 0 {
			return nil, fmt.Errorf("continuation needs messages")
		}
		msgs[len(msgs)-1]["prefix"] = json.RawMessage("true")
		top["messages"], _ = json.Marshal(msgs)
		return json.Marshal(top)
	case ContinueFinalMsg:
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			return nil, err
		}
		top["continue_final_message"] = json.RawMessage("true")
		top["add_generation_prompt"] = json.RawMessage("false")
		return json.Marshal(top)
	}
	return body, nil
}

// DecodeResponse reads an upstream success body of protocol p.
func DecodeResponse(p Protocol, body []byte) (*Response, error) {
	switch p {
	case Anthropic:
		return decodeAnthropicResponse(body)
	case Responses:
		r, _, err := DecodeResponsesObject(body)
		return r, err
	case Embeddings:
		return decodeEmbeddingsResponse(body)
	}
	return decodeOpenAIResponse(body)
}

// EncodeResponse writes r as protocol p's response body under the
// client-facing id.
func EncodeResponse(p Protocol, r *Response, id string) []byte {
	if p == Anthropic {
		return encodeAnthropicResponse(r, id)
	}
	return encodeOpenAIResponse(r, id)
}

// Decoder turns one upstream SSE event into neutral events, appended to
// out. An error means the event was malformed: the caller skips it and
// counts a protocol warning; the stream goes on. A Decoder keeps state
// across one stream and is not safe for concurrent use.
type Decoder interface {
	Decode(ev sse.Event, out []Event) ([]Event, error)
}

// NewDecoder returns a stream decoder for upstream protocol p.
func NewDecoder(p Protocol) Decoder {
	switch p {
	case Anthropic:
		return &anthropicDecoder{}
	case Responses:
		return &responsesDecoder{}
	}
	return &openAIDecoder{}
}

// Encoder writes neutral events in a client's stream protocol, appending
// wire bytes to dst. One Encoder serves a whole logical stream, across
// resumed attempts, so ids and block indexes stay continuous. It is not
// safe for concurrent use.
type Encoder interface {
	Start(dst []byte, inputTokens int64) []byte
	Text(dst []byte, text string) []byte
	ToolStart(dst []byte, index int, id, name string) []byte
	ToolArgs(dst []byte, index int, args string) []byte
	// Finish ends a complete stream; usage is what all attempts billed.
	Finish(dst []byte, finish string, usage gw.Usage, includeUsage bool) []byte
	// Error ends an interrupted stream in-band, with no terminator.
	Error(dst []byte, e *ClientError) []byte
}

// ModelSetter is an Encoder whose frames after the first name the model
// again (OpenAI's chunks, the Responses API's final object): SetModel
// makes the frames from then on name model — the model of the route that
// continues a stream another route began (docs/streaming.md). An encoder
// whose protocol names the model only at the start (Anthropic's
// message_start) is not one.
type ModelSetter interface {
	SetModel(model string)
}

// ChoiceEncoder is an Encoder whose protocol has several choices of one
// answer (OpenAI's n): SetChoice makes the frames from then on belong to
// choice i, and FinishChoice ends the current choice. Finish ends choice
// 0 and the stream.
type ChoiceEncoder interface {
	SetChoice(i int)
	FinishChoice(dst []byte, finish string) []byte
}

// ThinkingEncoder is an Encoder that can relay extended thinking
// (Anthropic's): thinking text, the signature that closes its block, and
// redacted thinking.
type ThinkingEncoder interface {
	Thinking(dst []byte, text string) []byte
	Signature(dst []byte, sig string) []byte
	RedactedThinking(dst []byte, data string) []byte
}

// RefusalEncoder is an Encoder whose protocol tells a refusal from text
// (OpenAI's); others render a refusal as text.
type RefusalEncoder interface {
	Refusal(dst []byte, text string) []byte
}

// LogprobsEncoder is an Encoder that can relay a text delta with its log
// probabilities (OpenAI's).
type LogprobsEncoder interface {
	TextLogprobs(dst []byte, text string, logprobs json.RawMessage) []byte
}

// NewEncoder returns a client stream encoder for protocol p.
func NewEncoder(p Protocol, id string, created int64, model string) Encoder {
	switch p {
	case Anthropic:
		return newAnthropicEncoder(id, model)
	case Responses:
		return NewResponsesEncoder(ResponseShell{ID: id, CreatedAt: created, Model: model})
	}
	return newOpenAIEncoder(id, created, model)
}

// ResponseID is the client-facing id of a logical request's answer in
// protocol p, derived from the request id so that joins and replays see
// the same id.
func ResponseID(p Protocol, requestID string) string {
	compact := strings.ReplaceAll(requestID, "-", "")
	if p == Anthropic {
		return "msg_og" + compact
	}
	return "chatcmpl-og" + compact
}
