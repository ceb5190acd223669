package gemini

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// Finish reasons that mean the model failed to produce a usable function
// call: the answer holds nothing a client could act on, so it is an
// error of the attempt (FailedGeneration), not an answer.
var failedCall = map[string]bool{"MALFORMED_FUNCTION_CALL": true, "UNEXPECTED_TOOL_CALL": true, "TOO_MANY_TOOL_CALLS": true}

// finishOf maps a Gemini finishReason to the neutral finish reason. STOP
// and MAX_TOKENS are normal ends; every other reason (SAFETY, RECITATION,
// BLOCKLIST, PROHIBITED_CONTENT, SPII, LANGUAGE, OTHER, the image
// reasons, a reason added later) withheld some or all of the answer and
// is reported as content_filter, never as a normal stop.
func finishOf(reason string, toolCalls bool) string {
	switch reason {
	case "STOP":
		if toolCalls {
			return provider.FinishToolCalls
		}
		return provider.FinishStop
	case "MAX_TOKENS":
		return provider.FinishLength
	}
	return provider.FinishContentFilter
}

// refusalText is the refusal a client sees when Gemini withheld the whole
// answer. It names the provider's reason, never its free text.
func refusalText(what, reason string) string {
	return "The provider withheld " + what + " (" + reasonWord(reason) + ")."
}

// reasonWord keeps a provider enum word printable and bounded.
func reasonWord(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// FailedGeneration is a 200 answer in which the model failed to produce a
// usable function call (finishReason MALFORMED_FUNCTION_CALL,
// UNEXPECTED_TOOL_CALL, TOO_MANY_TOOL_CALLS). Nothing in it can be
// delivered; another generation may succeed, so it is classified
// unavailable (Classify, on its UpstreamError).
type FailedGeneration struct {
	Reason string
}

func (e *FailedGeneration) Error() string {
	return "gemini: the model failed to produce a usable answer (finishReason " + reasonWord(e.Reason) + ")"
}

// UpstreamError renders e as a provider error for classification and
// receipts.
func (e *FailedGeneration) UpstreamError() *provider.UpstreamError {
	return &provider.UpstreamError{Status: 200, Type: "FAILED_GENERATION", Code: reasonWord(e.Reason), Message: e.Error()}
}

// Usage reads usageMetadata: input is every prompt token (cached content
// and tool-use prompts included), output the candidates' tokens plus
// thinking tokens, which Google bills as output.
func (u *usageMetadata) Usage() gw.Usage {
	if u == nil {
		return gw.Usage{}
	}
	return gw.Usage{InputTokens: u.PromptTokenCount + u.ToolUsePromptTokenCount,
		OutputTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount, CachedTokens: u.CachedContentTokenCount}
}

// callIDs names function calls, which Gemini usually sends without an id:
// a call keeps the provider's id when it has one, else gets
// call_<base>_<ordinal>, unique within the answer and across answers.
type callIDs struct{ base string }

func (c *callIDs) id(fc *functionCall, ordinal int, responseID string) string {
	if fc.ID != "" {
		return fc.ID
	}
	if c.base == "" {
		c.base = responseID
		if !validIDBase(c.base) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			c.base = hex.EncodeToString(b[:])
		}
	}
	return "call_" + c.base + "_" + strconv.Itoa(ordinal)
}

func validIDBase(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func argsText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	return string(raw)
}

// DecodeResponse reads a generateContent answer. A body that is not a
// GenerateContentResponse is an error; so is an answer whose model failed
// to produce a usable function call (*FailedGeneration).
func DecodeResponse(body []byte) (*provider.Response, error) {
	var in genResponse
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("gemini: generateContent body: %w", err)
	}
	if len(in.Error) > 0 && string(in.Error) != "null" {
		return nil, fmt.Errorf("gemini: generateContent body is an error")
	}
	r := &provider.Response{ID: in.ResponseID, Model: in.ModelVersion, Usage: in.UsageMetadata.Usage()}
	if len(in.Candidates) == 0 {
		if in.PromptFeedback == nil || in.PromptFeedback.BlockReason == "" {
			if in.UsageMetadata == nil {
				return nil, fmt.Errorf("gemini: generateContent body has no candidates and no prompt feedback")
			}
			return nil, &FailedGeneration{Reason: "NO_CANDIDATES"}
		}
		r.Refusal = refusalText("an answer to the prompt", in.PromptFeedback.BlockReason)
		r.Finish = provider.FinishContentFilter
		return r, nil
	}
	c := in.Candidates[0]
	if failedCall[c.FinishReason] {
		return nil, &FailedGeneration{Reason: c.FinishReason}
	}
	var ids callIDs
	if c.Content != nil {
		for i := range c.Content.Parts {
			p := &c.Content.Parts[i]
			switch {
			case p.Thought:
				// Thought summaries are only sent when asked for; oncegate
				// asks for none.
			case p.FunctionCall != nil:
				r.ToolCalls = append(r.ToolCalls, provider.ToolCall{ID: ids.id(p.FunctionCall, len(r.ToolCalls), in.ResponseID),
					Name: p.FunctionCall.Name, Arguments: argsText(p.FunctionCall.Args)})
			default:
				r.Text += p.Text
			}
		}
	}
	r.Finish = finishOf(c.FinishReason, len(r.ToolCalls) > 0)
	if c.FinishReason == "" {
		r.Finish = provider.FinishStop
		if len(r.ToolCalls) > 0 {
			r.Finish = provider.FinishToolCalls
		}
	}
	if r.Finish == provider.FinishContentFilter && r.Text == "" && len(r.ToolCalls) == 0 {
		r.Refusal = refusalText("the answer", c.FinishReason)
	}
	return r, nil
}

// Decoder turns streamGenerateContent?alt=sse events — each one
// GenerateContentResponse, no terminator — into neutral events. Usage is
// cumulative in every chunk that carries it. It implements
// provider.Decoder and keeps state for one stream.
type Decoder struct {
	started  bool
	visible  bool // text or a tool call was emitted
	finished bool
	tools    int
	ids      callIDs
}

// NewDecoder returns a decoder for one stream.
func NewDecoder() *Decoder { return &Decoder{} }

// Decode implements provider.Decoder.
func (d *Decoder) Decode(ev sse.Event, out []provider.Event) ([]provider.Event, error) {
	var in genResponse
	if err := json.Unmarshal(ev.Data, &in); err != nil {
		return out, fmt.Errorf("gemini: malformed stream chunk: %w", err)
	}
	if len(in.Error) > 0 && string(in.Error) != "null" {
		return append(out, provider.Event{Kind: provider.EvError, Err: ParseError(0, ev.Data)}), nil
	}
	if len(in.Candidates) == 0 && in.PromptFeedback == nil && in.UsageMetadata == nil {
		return out, errors.New("gemini: stream chunk has no candidates, prompt feedback or usage")
	}
	if !d.started {
		d.started = true
		out = append(out, provider.Event{Kind: provider.EvStart, ID: in.ResponseID, Model: in.ModelVersion})
	}
	finish, failed := "", ""
	if pf := in.PromptFeedback; pf != nil && pf.BlockReason != "" && len(in.Candidates) == 0 {
		out = append(out, provider.Event{Kind: provider.EvRefusal, Synthetic: true, Text: refusalText("an answer to the prompt", pf.BlockReason)})
		d.visible, finish = true, provider.FinishContentFilter
	}
	if len(in.Candidates) > 0 {
		c := in.Candidates[0]
		if c.Content != nil {
			for i := range c.Content.Parts {
				p := &c.Content.Parts[i]
				switch {
				case p.Thought:
				case p.FunctionCall != nil:
					idx := d.tools
					d.tools++
					out = append(out,
						provider.Event{Kind: provider.EvToolStart, ToolIndex: idx, ToolID: d.ids.id(p.FunctionCall, idx, in.ResponseID), ToolName: p.FunctionCall.Name},
						provider.Event{Kind: provider.EvToolArgs, ToolIndex: idx, Args: argsText(p.FunctionCall.Args)})
					d.visible = true
				case p.Text != "":
					out = append(out, provider.Event{Kind: provider.EvText, Text: p.Text})
					d.visible = true
				}
			}
		}
		switch {
		case failedCall[c.FinishReason]:
			failed = c.FinishReason
		case c.FinishReason != "":
			finish = finishOf(c.FinishReason, d.tools > 0)
			if finish == provider.FinishContentFilter && !d.visible {
				out = append(out, provider.Event{Kind: provider.EvRefusal, Synthetic: true, Text: refusalText("the answer", c.FinishReason)})
				d.visible = true
			}
		}
	}
	if in.UsageMetadata != nil {
		out = append(out, provider.Event{Kind: provider.EvUsage, Usage: in.UsageMetadata.Usage()})
	}
	if failed != "" {
		return append(out, provider.Event{Kind: provider.EvError, Err: (&FailedGeneration{Reason: failed}).UpstreamError()}), nil
	}
	if finish != "" && !d.finished {
		d.finished = true
		out = append(out, provider.Event{Kind: provider.EvFinish, Finish: finish})
	}
	return out, nil
}
