package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/retry"
	"github.com/oncegate/oncegate/internal/sse"
	"github.com/oncegate/oncegate/internal/upstream"
)

// output is a logical request's stream to its client (docs/streaming.md). It holds
// the response headers until the first visible output, so that every
// earlier failure stays invisible; it keeps one encoder across resumed
// attempts so the client reads one continuous stream; and it remembers
// what was delivered, for a resume's prefix.
type output struct {
	c            *call
	enc          provider.Encoder
	model        string // the model the encoder names: the serving route's
	buffer       bool   // stream.buffer: hold everything until the upstream finishes
	includeUsage bool
	started      bool   // the head and the opening frame are out
	pending      []byte // frames not yet published
	held         []byte // buffer mode: the current attempt's frames
	delivered    strings.Builder
	emitted      int64 // visible tokens the client has received
	stripLead    bool  // drop the next text's leading whitespace (resume seam)
	// choice is the choice the encoder's frames belong to, and opened
	// the choices past the first whose opening frame is out (OpenAI's
	// n; docs/streaming.md).
	choice int
	opened map[int]bool
}

func newOutput(c *call) *output {
	return &output{c: c, buffer: c.alias.Buffer, includeUsage: c.in.IR.IncludeUsage}
}

// streamHead is the head of a stream that is about to become visible.
func (o *output) streamHead(route string, attempts int) *coord.Head {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	api.SetIDHeaders(h, o.c.id, attempts)
	h.Set("X-Oncegate-Route", route)
	api.SetDropped(h, o.c.droppedOn(o.c.alias.Route(route)))
	return &coord.Head{Status: http.StatusOK, Header: h}
}

// attemptStream is one attempt's view of its upstream stream.
type attemptStream struct {
	route    *policy.Route
	ordinal  int
	race     *raceSlot
	claimed  bool // the attempt holds the output (it won its race, if any)
	model    string
	input    int64 // prompt tokens: the provider's count once known
	events   int
	warnings int
	tokens   int64 // output events read (counted): the gateway's count of the output generated
	emitted  int64 // of which the client was shown
	visible  bool
	inTool   bool
	finish   string // set once every choice has finished
	usage    gw.Usage
	// choices is how many choices the attempt's stream carries (OpenAI's
	// n, when its route carries it); finish0 is choice 0's finish reason
	// and othersDone counts the other choices that finished.
	choices    int
	finish0    string
	othersDone int
	hasUsage   bool
	done       bool
	streamErr  *provider.UpstreamError
}

// begin publishes the response head and the opening frame: the moment the
// stream becomes visible.
func (o *output) begin(a *attemptStream) {
	c := o.c
	o.model = cmp.Or(a.model, a.route.Model)
	o.enc = c.newEncoder(o.model)
	o.choice, o.opened = 0, nil
	if o.buffer {
		o.held = o.enc.Start(o.held[:0], a.input)
		return
	}
	c.flight.SetHead(o.streamHead(a.route.ID, a.ordinal+a.race.rivals()))
	o.started = true
	o.pending = o.enc.Start(o.pending, a.input)
}

// toChoice makes the encoder's next frames belong to choice i, opening
// the choice (its role frame) the first time it is seen.
func (o *output) toChoice(dst *[]byte, i int) {
	ce, ok := o.enc.(provider.ChoiceEncoder)
	if !ok || i == o.choice && (i == 0 || o.opened[i]) {
		return
	}
	ce.SetChoice(i)
	o.choice = i
	if i > 0 && !o.opened[i] {
		if o.opened == nil {
			o.opened = map[int]bool{}
		}
		o.opened[i] = true
		*dst = o.enc.Start(*dst, 0)
	}
}

// finishChoice ends choice i ≥ 1 of a stream of several (Finish ends
// choice 0 with the stream).
func (o *output) finishChoice(e *provider.Event) {
	ce, ok := o.enc.(provider.ChoiceEncoder)
	if !ok {
		return
	}
	dst := &o.pending
	if o.buffer {
		dst = &o.held
	}
	o.toChoice(dst, e.Choice)
	*dst = ce.FinishChoice(*dst, e.Finish)
}

// newEncoder starts the client's stream encoder; model is the upstream's.
func (c *call) newEncoder(model string) provider.Encoder {
	if c.turn != nil {
		shell := c.turn.Shell
		shell.Model = model
		return provider.NewResponsesEncoder(shell)
	}
	return provider.NewEncoder(c.proto, provider.ResponseID(c.proto, c.id), c.created.Unix(), model)
}

// errLostRace ends a stream whose rival showed output first.
var errLostRace = errors.New("lost the hedge race")

// claim makes a's attempt the one whose output the client gets: it wins
// its hedge race, if it has one, and in buffer mode drops what an earlier
// attempt held. It reports false when the rival won.
func (o *output) claim(a *attemptStream, slot *raceSlot) bool {
	if !slot.claim() {
		return false
	}
	a.claimed = true
	if o.buffer {
		o.enc, o.held = nil, o.held[:0]
	}
	return true
}

// emit relays one visible event.
func (o *output) emit(e *provider.Event, a *attemptStream) {
	if o.enc == nil || (o.buffer && len(o.held) == 0) {
		o.begin(a)
	}
	if m := cmp.Or(a.model, a.route.Model); m != o.model {
		// A continuation on another route: its chunks name its model.
		if s, ok := o.enc.(provider.ModelSetter); ok {
			s.SetModel(m)
		}
		o.model = m
	}
	dst := &o.pending
	if o.buffer {
		dst = &o.held
	}
	o.toChoice(dst, e.Choice)
	switch e.Kind {
	case provider.EvText:
		text := e.Text
		if o.stripLead {
			// The prefix sent for the resume was right-stripped and the
			// client already has that whitespace: do not double it.
			if text = strings.TrimLeftFunc(text, unicode.IsSpace); text == "" {
				return
			}
			o.stripLead = false
		}
		if le, ok := o.enc.(provider.LogprobsEncoder); ok && e.Logprobs != nil {
			*dst = le.TextLogprobs(*dst, text, e.Logprobs)
		} else {
			*dst = o.enc.Text(*dst, text)
		}
		if !o.buffer {
			o.delivered.WriteString(text)
		}
	case provider.EvRefusal:
		if re, ok := o.enc.(provider.RefusalEncoder); ok {
			*dst = re.Refusal(*dst, e.Text)
		} else {
			*dst = o.enc.Text(*dst, e.Text)
		}
	case provider.EvToolStart:
		*dst = o.enc.ToolStart(*dst, e.ToolIndex, e.ToolID, e.ToolName)
	case provider.EvToolArgs:
		*dst = o.enc.ToolArgs(*dst, e.ToolIndex, e.Args)
	case provider.EvThinking, provider.EvSignature, provider.EvRedactedThinking:
		te := o.enc.(provider.ThinkingEncoder) // the relay sends thinking to Anthropic clients only
		switch e.Kind {
		case provider.EvThinking:
			*dst = te.Thinking(*dst, e.Text)
		case provider.EvSignature:
			*dst = te.Signature(*dst, e.Text)
			return // not output of its own
		default:
			*dst = te.RedactedThinking(*dst, e.Text)
		}
	}
	if o.buffer {
		return
	}
	a.visible = true
	if counted(e) {
		a.emitted++
		o.emitted++
	}
}

// counted reports whether an output event counts as one token of output
// (docs/streaming.md, "What a broken stream is billed"): a piece of text,
// refusal, thinking or tool-call arguments the model generated. A tool
// call's opening (its id and name) makes a stream visible but is not
// counted, nor is a refusal the gateway wrote itself: so the count is a
// lower bound of the tokens the output holds, which a client can check
// against the deltas it received.
func counted(e *provider.Event) bool {
	return e.Kind != provider.EvToolStart && e.Kind != provider.EvSignature && !e.Synthetic
}

// flush publishes pending frames to every subscriber.
func (o *output) flush() {
	if len(o.pending) == 0 {
		return
	}
	o.c.flight.Write(o.pending)
	o.pending = o.pending[:0]
	if o.c.direct != nil {
		o.c.direct.send()
	}
}

// prefix is the delivered text a resume continues, right-stripped of
// whitespace (some providers reject a prefill ending in whitespace).
func (o *output) prefix() string {
	d := o.delivered.String()
	p := strings.TrimRightFunc(d, unicode.IsSpace)
	o.stripLead = len(p) < len(d)
	return p
}

// between tells the client what happens next after a visible stream broke:
// an oncegate.* event for clients that asked (X-Oncegate-Stream-Events: 1),
// an SSE comment for everyone else (official SDKs mis-parse unknown events).
func (o *output) between(d retry.Decision, attempt int) {
	switch d.Action {
	case retry.ActionResume:
		if o.c.streamEvents {
			data, _ := json.Marshal(map[string]int64{"after_tokens": o.emitted, "attempt": int64(attempt)})
			o.pending = sse.AppendEvent(o.pending, "oncegate.resuming", data)
		} else {
			o.pending = sse.AppendComment(o.pending, "oncegate resuming after_tokens="+strconv.FormatInt(o.emitted, 10))
		}
	case retry.ActionRestart:
		// Only clients that sent both opt-in headers are ever restarted.
		data, _ := json.Marshal(map[string]any{"reason": "provider_interrupted", "attempt": attempt})
		o.pending = sse.AppendEvent(o.pending, "oncegate.restart", data)
		o.delivered.Reset()
		o.stripLead = false
	}
	o.flush()
}

// complete renders the end of a successful stream: the finish frame with
// the usage billed across all attempts, and the terminator. A stream held
// in buffer mode is sent whole, with its head.
func (o *output) complete(route *policy.Route, finish string, billed gw.Usage) (*coord.Head, []byte) {
	o.flush()
	var head *coord.Head
	var tail []byte
	if !o.started {
		head = o.streamHead(route.ID, len(o.c.rec.R.Attempts))
		if o.enc == nil { // an answer with no visible output at all
			o.enc = o.c.newEncoder(route.Model)
			o.held = o.enc.Start(o.held[:0], billed.InputTokens)
		}
		tail = append(tail, o.held...)
		o.started = true
	}
	return head, o.enc.Finish(tail, finish, billed, o.includeUsage)
}

// interrupt renders the end of a visible stream that cannot be completed
// (docs/streaming.md stop): an in-band error and no terminator, so the client's
// SDK reports an error rather than a truncated answer.
func (o *output) interrupt(d retry.Decision) []byte {
	o.flush()
	c := o.c
	ce := &provider.ClientError{Type: "stream_interrupted", Code: "stream_interrupted",
		Message:       "the provider's stream broke after " + strconv.FormatInt(o.emitted, 10) + " tokens and could not be resumed (" + string(d.Reason) + ")",
		EmittedTokens: o.emitted, RequestID: c.id, Terminal: string(gw.TerminalIndeterminate), Reason: string(d.Reason)}
	return o.enc.Error(nil, ce)
}

// relay reads one attempt's upstream stream, relaying visible output as it
// arrives, and classifies how the stream ended.
func (c *call) relay(ctx context.Context, res *attemptResult, resp *upstream.Response) *attemptResult {
	a := &attemptStream{route: res.route, ordinal: res.ordinal, race: res.race, input: res.prompt, choices: c.choicesOn(res.route)}
	o := c.out
	if o.buffer && res.race == nil {
		o.enc, o.held = nil, o.held[:0]
	}
	rd := c.live.clients[res.route.Provider.ID].ep.Stream(resp.Body)
	if r, ok := rd.(provider.Releaser); ok {
		defer r.Release()
	}
	var evs []provider.Event
	var endErr error
read:
	for {
		var err error
		evs, err = rd.Next(evs[:0])
		if errors.Is(err, provider.ErrMalformedEvent) {
			a.events++
			a.warnings++ // a malformed event is skipped, never forwarded
			continue
		}
		if err != nil {
			endErr = err
			break
		}
		a.events++
		stray := false
		for i := range evs {
			e := &evs[i]
			if e.Choice < 0 || e.Choice >= a.choices {
				// A choice the request did not ask for is skipped, and
				// counted once per event as a malformed event is.
				if !stray {
					stray = true
					a.warnings++
				}
				continue
			}
			switch e.Kind {
			case provider.EvStart:
				a.model = e.Model
				if c.turn != nil && e.ID != "" {
					c.turn.UpstreamID = e.ID
				}
			case provider.EvText, provider.EvRefusal, provider.EvToolStart, provider.EvToolArgs, provider.EvThinking, provider.EvRedactedThinking, provider.EvSignature:
				if counted(e) && e.Visible() {
					a.tokens++ // generated, whether or not it is shown
				}
				switch e.Kind {
				case provider.EvToolStart:
					a.inTool = true
				case provider.EvSignature:
					if a.claimed && c.proto == provider.Anthropic {
						o.emit(e, a) // part of the thinking block it follows
					}
					continue
				case provider.EvThinking, provider.EvRedactedThinking:
					if c.proto != provider.Anthropic {
						// The OpenAI protocol has no thinking to show: it
						// is generated (and billed), not output.
						continue
					}
				}
				if e.Visible() {
					if !a.claimed && !o.claim(a, res.race) {
						endErr = errLostRace
						break read
					}
					o.emit(e, a)
				}
			case provider.EvFinish:
				switch {
				case e.AllChoices:
					// The prompt was refused: no choice has more to come.
					a.finish0, a.othersDone = e.Finish, a.choices-1
				case e.Choice > 0:
					a.othersDone++
					if a.claimed && o.enc != nil {
						o.finishChoice(e)
					}
				default:
					a.finish0 = e.Finish
				}
				if a.finish0 != "" && a.othersDone >= a.choices-1 {
					a.finish = a.finish0
				}
			case provider.EvUsage:
				a.usage, a.hasUsage = e.Usage, true
				if e.Usage.InputTokens > 0 {
					a.input = e.Usage.InputTokens
				}
			case provider.EvError:
				a.streamErr = c.g.scrubError(e.Err)
				break read
			case provider.EvDone:
				a.done = true
				break read
			}
		}
		if !rd.Pending() {
			// Publish what arrived before waiting for more: one write per
			// upstream read rather than per event, and never a delay.
			o.flush()
		}
	}
	o.flush()
	if endErr == nil {
		// Read the little that follows the terminator (the chunked
		// encoding's end) so the connection returns to the pool instead
		// of being closed.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	}
	return c.endStream(res, a, endErr)
}

// billed is what an attempt's stream is charged, and whether that is an
// estimate (docs/streaming.md, "What a broken stream is billed"). A
// stream that completed with the provider's usage is charged that usage.
// Any other — cut, failed, lost, abandoned by its client, or from a
// provider whose final usage never came — is charged the larger of the
// usage the provider reported so far (Anthropic's message_start says 1
// output token; Gemini reports on every chunk) and the gateway's own count
// of the output it read, with the prompt's estimate when the provider
// never counted the input. Either way the output charged is never below
// the output the client was shown.
func (a *attemptStream) billed(prompt int64) (gw.Usage, bool) {
	u := a.usage
	complete := a.streamErr == nil && (a.done || a.finish != "")
	if complete && a.hasUsage && u.OutputTokens >= a.emitted {
		return u, false
	}
	if u.InputTokens == 0 {
		u.InputTokens = prompt
	}
	u.OutputTokens = max(u.OutputTokens, a.tokens, a.emitted)
	return u, true
}

// endStream turns how a stream ended into the attempt's outcome.
func (c *call) endStream(res *attemptResult, a *attemptStream, endErr error) *attemptResult {
	res.obs.VisibleOutput, res.obs.EmittedTokens, res.obs.InToolCall, res.obs.ProtocolWarnings = a.visible, a.emitted, a.inTool, a.warnings
	res.obs.Usage, res.obs.UsageEstimated = a.billed(res.prompt)
	var ue *upstream.Error
	isUpstream := errors.As(endErr, &ue)
	switch {
	case errors.Is(endErr, errLostRace):
		return c.observe(res, gw.KindCancelled, gw.CauseHedgeLost, "lost the hedge race")
	case (isUpstream && ue.Cancelled) || c.ctx.Err() != nil:
		return c.observe(res, gw.KindCancelled, gw.CauseClientGone, "client disconnected")
	case a.streamErr == nil && (a.done || a.finish != ""):
		// A stream that reached its finish reason is complete even if the
		// terminator never came (docs/streaming.md).
		if !res.race.claim() {
			return c.observe(res, gw.KindCancelled, gw.CauseHedgeLost, "lost the hedge race")
		}
		res.finish = cmp.Or(a.finish, provider.FinishStop)
		return c.observe(res, gw.KindOK, "", "")
	case a.visible:
		detail := "stream ended without a finish reason"
		if a.streamErr != nil {
			detail = "provider error mid-stream: " + a.streamErr.Message
		} else if endErr != nil && endErr != io.EOF {
			detail = endErr.Error()
		}
		if a.inTool {
			detail += " (inside a tool call)"
		}
		var cause gw.Cause
		if isUpstream && ue.Timeout && ue.Phase == upstream.PhaseBody {
			cause = gw.CauseStall // silent past the idle timeout: another route continues
		}
		return c.observe(res, gw.KindStreamInterruptedAfterOutput, cause, detail)
	case a.streamErr != nil:
		k, cause := c.live.clients[res.route.Provider.ID].ep.StreamFault(a.streamErr)
		res.upstreamErr = a.streamErr
		return c.observe(res, k, cause, "provider error in stream: "+a.streamErr.Message)
	case isUpstream:
		k, cause := ue.Kind()
		return c.observe(res, k, cause, ue.Error())
	case errors.Is(endErr, provider.ErrFrameTooLarge):
		return c.observe(res, gw.KindProtocolViolation, "", endErr.Error())
	case a.events > 0 && a.warnings == a.events:
		return c.observe(res, gw.KindProtocolViolation, "", "the stream had no valid events")
	}
	if endErr != nil && endErr != io.EOF {
		// A broken frame (a Bedrock CRC) says why in the receipt.
		return c.observe(res, gw.KindUnavailable, "", "stream broke before any output: "+endErr.Error())
	}
	return c.observe(res, gw.KindUnavailable, "", "stream ended before any output")
}
