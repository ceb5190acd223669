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

// byIndex orders an answer's candidates by their index, which must run
// 0 to len-1 with none twice (a candidate of index 0 may omit it, as
// proto3 JSON omits zeros); more than provider.MaxChoices is an error.
func byIndex(cands []candidate) ([]*candidate, error) {
	if len(cands) > provider.MaxChoices {
		return nil, fmt.Errorf("gemini: %d candidates, more than the %d a request may ask for", len(cands), provider.MaxChoices)
	}
	out := make([]*candidate, len(cands))
	for i := range cands {
		c := &cands[i]
		if c.Index < 0 || c.Index >= len(cands) || out[c.Index] != nil {
			return nil, fmt.Errorf("gemini: candidate index %d among %d candidates: indexes must run 0 to %d, each once", c.Index, len(cands), len(cands)-1)
		}
		out[c.Index] = c
	}
	return out, nil
}

// choiceOf reads one candidate as a choice; calls counts the function
// calls named so far in the answer, so that ids stay unique across its
// candidates.
func choiceOf(c *candidate, ids *callIDs, calls *int, responseID string) provider.Choice {
	var ch provider.Choice
	if c.Content != nil {
		for i := range c.Content.Parts {
			p := &c.Content.Parts[i]
			switch {
			case p.Thought:
				// Thought summaries are only sent when asked for; oncegate
				// asks for none.
			case p.FunctionCall != nil:
				ch.ToolCalls = append(ch.ToolCalls, provider.ToolCall{ID: ids.id(p.FunctionCall, *calls, responseID),
					Name: p.FunctionCall.Name, Arguments: argsText(p.FunctionCall.Args)})
				*calls++
			default:
				ch.Text += p.Text
			}
		}
	}
	ch.Finish = finishOf(c.FinishReason, len(ch.ToolCalls) > 0)
	if c.FinishReason == "" {
		ch.Finish = provider.FinishStop
		if len(ch.ToolCalls) > 0 {
			ch.Finish = provider.FinishToolCalls
		}
	}
	if ch.Finish == provider.FinishContentFilter && ch.Text == "" && len(ch.ToolCalls) == 0 {
		ch.Refusal = refusalText("the answer", c.FinishReason)
	}
	return ch
}

// DecodeResponse reads a generateContent answer: each candidate a choice
// by its index (candidateCount, OpenAI's n). A body that is not a
// GenerateContentResponse is an error; so is an answer with a candidate
// whose model failed to produce a usable function call
// (*FailedGeneration): the answer the client asked for is not all there.
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
	cands, err := byIndex(in.Candidates)
	if err != nil {
		return nil, err
	}
	for _, c := range cands {
		if failedCall[c.FinishReason] {
			return nil, &FailedGeneration{Reason: c.FinishReason}
		}
	}
	var ids callIDs
	calls := 0
	for i, c := range cands {
		ch := choiceOf(c, &ids, &calls, in.ResponseID)
		if i == 0 {
			r.Text, r.Refusal, r.ToolCalls, r.Finish = ch.Text, ch.Refusal, ch.ToolCalls, ch.Finish
			continue
		}
		r.Others = append(r.Others, ch)
	}
	return r, nil
}

// Decoder turns streamGenerateContent?alt=sse events — each one
// GenerateContentResponse, no terminator — into neutral events, each
// candidate's as the choice of its index. Usage is cumulative in every
// chunk that carries it, and counts every candidate. It implements
// provider.Decoder and keeps state for one stream.
type Decoder struct {
	started bool
	// whole: the prompt was refused, which ends every choice.
	whole bool
	cands []candState
	calls int // function calls named so far, across candidates
	ids   callIDs
}

// candState is what a stream has shown of one candidate.
type candState struct {
	visible  bool // text or a tool call was emitted
	finished bool
	tools    int
}

// NewDecoder returns a decoder for one stream.
func NewDecoder() *Decoder { return &Decoder{} }

// cand is the state of candidate i, which Decode has bounded to
// provider.MaxChoices.
func (d *Decoder) cand(i int) *candState {
	for len(d.cands) <= i {
		d.cands = append(d.cands, candState{})
	}
	return &d.cands[i]
}

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
	for _, c := range in.Candidates {
		// A chunk holds some of the candidates, each naming its index.
		if c.Index < 0 || c.Index >= provider.MaxChoices {
			return out, fmt.Errorf("gemini: stream chunk has a candidate of index %d, outside 0 to %d", c.Index, provider.MaxChoices-1)
		}
	}
	if !d.started {
		d.started = true
		out = append(out, provider.Event{Kind: provider.EvStart, ID: in.ResponseID, Model: in.ModelVersion})
	}
	var finishes []provider.Event
	failed := ""
	if pf := in.PromptFeedback; pf != nil && pf.BlockReason != "" && len(in.Candidates) == 0 {
		out = append(out, provider.Event{Kind: provider.EvRefusal, Synthetic: true, Text: refusalText("an answer to the prompt", pf.BlockReason)})
		d.cand(0).visible = true
		if !d.whole {
			finishes = append(finishes, provider.Event{Kind: provider.EvFinish, Finish: provider.FinishContentFilter, AllChoices: true})
		}
		d.whole = true
	}
	for i := range in.Candidates {
		c := &in.Candidates[i]
		st := d.cand(c.Index)
		if c.Content != nil {
			for j := range c.Content.Parts {
				p := &c.Content.Parts[j]
				switch {
				case p.Thought:
				case p.FunctionCall != nil:
					idx := st.tools
					st.tools++
					out = append(out,
						provider.Event{Kind: provider.EvToolStart, ToolIndex: idx, ToolID: d.ids.id(p.FunctionCall, d.calls, in.ResponseID), ToolName: p.FunctionCall.Name, Choice: c.Index},
						provider.Event{Kind: provider.EvToolArgs, ToolIndex: idx, Args: argsText(p.FunctionCall.Args), Choice: c.Index})
					d.calls++
					st.visible = true
				case p.Text != "":
					out = append(out, provider.Event{Kind: provider.EvText, Text: p.Text, Choice: c.Index})
					st.visible = true
				}
			}
		}
		switch {
		case failedCall[c.FinishReason]:
			failed = c.FinishReason
		case c.FinishReason != "" && !st.finished && !d.whole:
			st.finished = true
			finish := finishOf(c.FinishReason, st.tools > 0)
			if finish == provider.FinishContentFilter && !st.visible {
				out = append(out, provider.Event{Kind: provider.EvRefusal, Synthetic: true, Text: refusalText("the answer", c.FinishReason), Choice: c.Index})
				st.visible = true
			}
			finishes = append(finishes, provider.Event{Kind: provider.EvFinish, Finish: finish, Choice: c.Index})
		}
	}
	if in.UsageMetadata != nil {
		out = append(out, provider.Event{Kind: provider.EvUsage, Usage: in.UsageMetadata.Usage()})
	}
	if failed != "" {
		return append(out, provider.Event{Kind: provider.EvError, Err: (&FailedGeneration{Reason: failed}).UpstreamError()}), nil
	}
	return append(out, finishes...), nil
}
