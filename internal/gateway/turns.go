package gateway

import (
	"cmp"
	"context"
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/conversation"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
)

// A call that is a try of a conversation turn (docs/conversations.md)
// reaches its turn through these hooks: the stateful route's attempts and
// their reconciliation, and the turn settled with the try.

// statefulAttempt makes one attempt of a turn on a stateful route.
func (c *call) statefulAttempt(ctx context.Context, res *attemptResult, n int) *attemptResult {
	route := res.route
	conv, err := c.turn.UpstreamConversation(ctx, route)
	if err != nil {
		// Nothing was generated: the turn's input never reached a model.
		return c.observe(res, gw.KindTimeoutBeforeResponse, "", "create the upstream conversation: "+err.Error())
	}
	tc := c.turn
	body, err := provider.BuildResponsesUpstream(tc.Req, tc.Input, route.Model, conv, c.stream, c.outputLimit(route, false))
	if err != nil {
		return c.observe(res, gw.KindInvalidRequest, "", err.Error())
	}
	hdr := http.Header{}
	// One key for every try of the turn: an upstream that honours it
	// dedupes them itself.
	hdr.Set("Idempotency-Key", "og-"+tc.Turn.ResponseID)
	return c.exchange(ctx, res, &provider.Outbound{Path: "/responses", Body: body, PromptTokens: c.in.PromptTokens}, hdr)
}

// reconcileAttempt settles an ambiguous attempt on a stateful route by
// asking the upstream what it holds, before the engine decides anything:
// found, the answer is adopted and the attempt succeeded; absent, nothing
// was committed and the attempt is an ordinary retryable failure; copies
// beyond the first are removed upstream and recorded as orphans. Past
// max_ambiguous such attempts, or when the upstream cannot tell, it stays
// indeterminate and the turn ends unknown.
func (c *call) reconcileAttempt(ctx context.Context, res *attemptResult) *attemptResult {
	if !ambiguousOnStateful(res) {
		return res
	}
	tc := c.turn
	prior := tc.Turn.Ambiguous
	for _, a := range c.rec.R.Attempts {
		if a.Reconciled == "absent" || a.Reconciled == "unknown" {
			prior++
		}
	}
	found, orphans, err := tc.Reconcile(ctx, res.route, c.in.PromptTokens)
	if orphans != nil {
		res.obs.Orphans, res.obs.OrphansCostUSD = orphans.Recorded, orphans.Cost.USD()
	}
	switch {
	case err != nil:
		c.g.log.Warn("could not reconcile a turn", "response_id", tc.Turn.ResponseID, "request_id", c.id, "err", err)
		res.obs.Reconciled = "unknown"
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", res.detail+"; reconcile failed: "+err.Error())
	case found != nil:
		res.obs.Reconciled = "found"
		return c.adopt(res, found)
	case prior+1 >= c.g.policy().Conversations.MaxAmbiguous:
		res.obs.Reconciled = "absent"
		tc.MarkSuspect()
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", res.detail+"; not committed upstream, and the turn has had its ambiguous tries")
	default:
		// Nothing was committed: the failure is what it looked like, and
		// the engine decides on it as on any other — except that a route
		// that just answered the lookup is not silent, so a first-byte
		// timeout does not rule it out for the retry.
		res.obs.Reconciled = "absent"
		tc.MarkSuspect()
		if res.obs.Cause == gw.CauseFirstByteTimeout {
			res.obs.Cause = ""
		}
		return res
	}
}

// ambiguousOnStateful reports whether a failed attempt on a stateful route
// may have been committed upstream: its request left and its reply was
// lost (a read timeout, a reset, a 502 or 504 from the infrastructure in
// front, a stream that broke).
func ambiguousOnStateful(res *attemptResult) bool {
	switch res.kind {
	case gw.KindStreamInterruptedAfterOutput:
		return true
	case gw.KindTimeoutBeforeResponse, gw.KindUnavailable:
		switch st := res.obs.HTTPStatus; {
		case st == 0:
			return res.sent
		case st/100 == 2, st == http.StatusBadGateway, st == http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// adopt makes an answer the upstream committed, whose reply was lost, the
// attempt's answer: whole for a JSON turn; for a stream, what the client
// has not seen yet of it.
func (c *call) adopt(res *attemptResult, found *provider.Response) *attemptResult {
	found.Model = cmp.Or(found.Model, res.route.Model)
	// The committed answer is billed whole, by estimate: never below what
	// the attempt's own stream counted before its reply was lost.
	usage := gw.Usage{InputTokens: c.in.PromptTokens, OutputTokens: max(estimateOutput(found), res.obs.Usage.OutputTokens)}
	res.obs.Usage, res.obs.UsageEstimated = usage, true
	if !c.stream {
		res.obs.VisibleOutput, res.obs.EmittedTokens = true, usage.OutputTokens
		res.body = c.encodeResponse(found)
		return c.observe(res, gw.KindOK, "", "")
	}
	o := c.out
	delivered := o.delivered.String()
	if o.started && (len(found.ToolCalls) > 0 || len(delivered) > len(found.Text) || found.Text[:len(delivered)] != delivered) {
		res.obs.Reconciled = "unknown"
		return c.observe(res, gw.KindUnknownProviderAcceptance, "", "the committed answer does not continue what the client was shown")
	}
	a := &attemptStream{route: res.route, ordinal: res.ordinal, claimed: true, model: res.route.Model}
	if rest := found.Text[len(delivered):]; rest != "" {
		o.emit(&provider.Event{Kind: provider.EvText, Text: rest}, a)
	}
	for i, tc := range found.ToolCalls {
		o.emit(&provider.Event{Kind: provider.EvToolStart, ToolIndex: i, ToolID: tc.ID, ToolName: tc.Name}, a)
		o.emit(&provider.Event{Kind: provider.EvToolArgs, ToolIndex: i, Args: tc.Arguments}, a)
	}
	if o.enc == nil {
		o.begin(a)
	}
	o.flush()
	// Shown of this attempt: what its stream relayed before it broke, and
	// the rest sent now.
	res.obs.VisibleOutput, res.obs.EmittedTokens = true, res.obs.EmittedTokens+a.emitted
	res.obs.Usage.OutputTokens = max(res.obs.Usage.OutputTokens, res.obs.EmittedTokens)
	res.finish = found.Finish
	return c.observe(res, gw.KindOK, "", "")
}

// settleTurn writes what a finished try made of its turn: done with the
// response object, unknown when the try could not tell whether its answer
// was produced, failed (nothing committed) otherwise.
func (c *call) settleTurn(head *coord.Head, tail []byte, last *attemptResult) {
	tc := c.turn
	r := c.rec.R
	o := conversation.Outcome{Status: tc.Turn.Status, Response: tc.Turn.Response}
	switch {
	case r.Terminal == string(gw.TerminalSucceeded):
		o.State = ledger.TurnDone
		if enc, ok := c.out.enc.(*provider.ResponsesEncoder); ok && c.stream {
			o.Response = enc.Final()
		} else if last != nil {
			o.Response = last.body
		}
	case ledgerState(gw.Terminal(r.Terminal)) == ledger.Indeterminate || r.Terminal == string(gw.TerminalCancelled) && c.visible(),
		c.cancelledUpstream():
		o.State = ledger.TurnUnknown
		o.Ambiguous, o.KnownUncommitted = c.ambiguousAttempts(), c.knownUncommitted()
	default:
		o.State = ledger.TurnFailed
		if head != nil {
			o.Status, o.Response = head.Status, tail
		}
	}
	tc.Settle(o)
}

// turnUnknownError is what a client is told when a try of its turn ended
// not knowing whether the provider answered.
func (c *call) turnUnknownError() *api.Error {
	return c.turn.UnknownError(c.ambiguousAttempts(), c.knownUncommitted())
}

// ambiguousAttempts counts what a try that ended unknown adds to its
// turn's ambiguous count: on a stateful route each attempt found absent or
// left unknown by the reconciliation; otherwise the try itself.
func (c *call) ambiguousAttempts() int {
	if !c.alias.Stateful {
		return 1
	}
	n := 0
	for _, a := range c.rec.R.Attempts {
		if a.Reconciled == "absent" || a.Reconciled == "unknown" || a.Kind == string(gw.KindCancelled) {
			n++
		}
	}
	return max(n, 1)
}

// knownUncommitted reports whether a try that ended unknown is known to
// have added nothing to the conversation: the gateway holds the
// conversation, or the provider was asked and holds none of it.
func (c *call) knownUncommitted() bool {
	r := c.rec.R
	return !c.alias.Stateful || len(r.Attempts) > 0 && r.Attempts[len(r.Attempts)-1].Reconciled == "absent"
}

// cancelledUpstream reports whether the try was cancelled (its clients
// left) while an attempt at a stateful route was out: the provider may
// have committed it, so the turn is unknown, to be reconciled.
func (c *call) cancelledUpstream() bool {
	r := c.rec.R
	if c.alias == nil || !c.alias.Stateful || r.Terminal != string(gw.TerminalCancelled) || len(r.Attempts) == 0 {
		return false
	}
	return r.Attempts[len(r.Attempts)-1].Kind == string(gw.KindCancelled)
}

// conversationFacts are the receipt's conversation counts once the try
// has ended: every earlier turn is done, so the conversation holds depth
// user turns and as many assistant turns if this one answered.
func (c *call) conversationFacts() {
	cv := c.rec.R.Conversation
	if cv == nil {
		return
	}
	cv.UserTurns, cv.AssistantTurns = c.turn.Turn.Depth-1, c.turn.Turn.Depth-1
	if c.rec.R.Terminal == string(gw.TerminalSucceeded) {
		cv.UserTurns++
		cv.AssistantTurns++
	}
}
