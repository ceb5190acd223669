package gateway

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
	"github.com/oncegate/oncegate/internal/tracing"
	"github.com/oncegate/oncegate/internal/upstream"
)

// maxErrorBody bounds how much of a provider's error body is read.
const maxErrorBody = 64 << 10

// runAttempts is stage 4: it drives the engine — admit the first
// attempt and claim the identity, then for each decided attempt wait for
// its not_before, acquire what it dispatches with (docs/overload.md),
// make it durable before it leaves and record what happened — until the
// engine stops. It returns the last decision and attempt for settle;
// settle is false when the request was answered or aborted on the way (a
// refusal, a replay, a follow, a store that failed) and has nothing left
// to commit.
func (c *call) runAttempts() (d retry.Decision, last *attemptResult, settle bool) {
	ok, wait, err := true, time.Duration(0), error(nil)
	if !c.rateTaken {
		ok, wait, err = c.g.tenants.Take(c.tenant.ID)
	}
	c.rateTaken = false // a later run of this call (a new request after a follow) is counted
	if err != nil {
		e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
		e.RetryAfter = 1
		c.publishError(e, api.Meta{})
		return d, nil, false
	}
	if !ok {
		c.rateLimited(wait)
		return d, nil, false
	}
	adm := c.admission(false)
	d, p, err := c.admit(c.rec.Start(adm, c.created), adm)
	if err != nil {
		c.abort(err)
		return d, nil, false
	}
	if !c.claim(d) {
		c.release(p, nil)
		if c.followTo != nil {
			c.follow(c.followTo)
		}
		return d, nil, false
	}
	if d.Dispatches() {
		c.g.budget.First(c.providerOf(d.Route))
	}
	failpoint("after_dispatch_commit")
	for d.Dispatches() {
		if p == nil { // a later attempt: wait for it, then admit it
			if !c.sleepUntil(d.NotBefore) {
				c.rec.Cancel()
				break
			}
			if d, p, err = c.admit(d, c.admission(true)); err != nil {
				c.abort(err)
				return d, nil, false
			}
			if p == nil {
				break // refused: the engine stopped
			}
			if !c.sleepUntil(d.NotBefore) { // decided again, perhaps later
				c.release(p, nil)
				c.rec.Cancel()
				break
			}
			if err := c.log.append(c.ctx, c.dispatchEvents(d, len(c.rec.R.Attempts)+1)...); err != nil {
				c.release(p, nil)
				c.abort(err)
				return d, nil, false
			}
		}
		if !c.g.clock.Now().Before(c.deadline) {
			// The deadline passed while the attempt was being made durable:
			// no attempt is sent after the deadline.
			c.release(p, nil)
			c.rec.Expire()
			d = retry.Decision{Action: retry.ActionStop, Terminal: gw.TerminalDeadline, Reason: gw.ReasonDeadline}
			break
		}
		n := len(c.rec.R.Attempts) + 1
		var res *attemptResult
		if c.hedgeable(d) {
			res, d, err = c.hedged(d, p, n)
		} else {
			res, d, err = c.single(c.attempt(c.ctx, d, n, p, nil, c.g.clock.Now()), p)
		}
		if err != nil {
			c.abort(err)
			return d, nil, false
		}
		p, last = nil, res
		if d.Dispatches() && c.out.started {
			c.out.between(d, len(c.rec.R.Attempts)+1)
		}
	}
	return d, last, true
}

// rateLimited refuses a new logical request of a tenant over its rate.
func (c *call) rateLimited(wait time.Duration) {
	c.g.metrics.ObserveTenantRejection(c.tenant.ID, api.CodeTenantRateLimited)
	e := api.Errorf(api.CodeTenantRateLimited, "tenant %s is over its %d requests per minute", c.tenant.ID, c.tenant.RequestsPerMinute)
	e.RetryAfter = int(math.Ceil(max(1, wait.Seconds())))
	c.publishError(e, api.Meta{})
}

// single observes one unhedged attempt: its permit goes back, the engine
// decides what follows, and both are logged.
func (c *call) single(res *attemptResult, p *permit) (*attemptResult, retry.Decision, error) {
	if c.turn != nil && res.route.Provider.Impl.Spec().Stateful {
		res = c.reconcileAttempt(c.ctx, res)
	}
	c.release(p, res)
	d, err := c.rec.Observe(res.obs, c.admission(true))
	if err != nil {
		return nil, retry.Decision{}, err
	}
	c.logObserved(1)
	return res, d, nil
}

// logObserved appends the last k attempts' observations and the decision
// that followed them to the event log.
func (c *call) logObserved(k int) {
	r := c.rec.R
	for _, a := range r.Attempts[len(r.Attempts)-k:] {
		c.log.later(ledger.EvObserved, a.ObservedAt, a, ledger.ReceiptRef{InReceipt: true, Ordinal: a.Ordinal})
	}
	at := r.Attempts[len(r.Attempts)-1].ObservedAt
	d := r.Decisions[len(r.Decisions)-1]
	c.log.later(ledger.EvDecision, at, d, ledger.ReceiptRef{InReceipt: true, AfterAttempt: d.AfterAttempt})
}

// dispatchEvents are attempt n's reserved and dispatched events: durable
// before its bytes leave (docs/identity.md).
func (c *call) dispatchEvents(d retry.Decision, n int) []ledger.Event {
	de := ledger.Dispatch{Ordinal: n, Route: d.Route, Purpose: string(d.Purpose()), NotBefore: d.NotBefore.UTC(), ReserveUSD: d.Reserve.USD()}
	now := c.g.clock.Now()
	reserved := c.log.event(ledger.EvReserved, now, de)
	dispatched := reserved // the same payload, encoded once
	c.log.seq++
	dispatched.Seq, dispatched.Type = c.log.seq, ledger.EvDispatch
	return []ledger.Event{reserved, dispatched}
}

// sleepUntil waits for t, or returns false if the flight was cancelled.
func (c *call) sleepUntil(t time.Time) bool {
	for {
		d := t.Sub(c.g.clock.Now())
		if d <= 0 {
			return c.ctx.Err() == nil
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-c.ctx.Done():
			timer.Stop()
			return false
		}
	}
}

// op is the operation the call's attempts perform.
func (c *call) op() provider.Op {
	if c.proto == provider.Embeddings {
		return provider.OpEmbeddings
	}
	return provider.OpChat
}

// attempt makes physical attempt n on the decided route, started at
// started, under permit p; slot is its place in a hedge race (nil: none).
// ctx ends it early (the client left, or its race was lost).
func (c *call) attempt(ctx context.Context, d retry.Decision, n int, p *permit, slot *raceSlot, started time.Time) *attemptResult {
	route := c.alias.Route(d.Route)
	res := &attemptResult{route: route, ordinal: n, race: slot, purpose: string(d.Purpose())}
	res.obs = receipt.Observation{StartedAt: started, DroppedFields: c.droppedOn(route)}
	if p != nil {
		res.obs.Breaker = receipt.BreakerState{State: p.ticket.State.String(), Generation: p.ticket.Generation}
	}
	if route.Provider.Impl.Spec().Stateful {
		return c.statefulAttempt(ctx, res, n)
	}
	target := provider.Target{Model: route.Model, Stream: c.stream,
		MaxOutputTokens: route.Caps.MaxOutputTokens, Continuation: string(route.Caps.Continuation),
		MaxTokens: c.outputLimit(route, d.Action == retry.ActionResume), Beta: c.anthropicBeta}
	var prefix *string
	if d.Action == retry.ActionResume {
		p := c.out.prefix()
		prefix = &p
	}
	out, err := c.live.clients[route.Provider.ID].ep.Request(c.in, target, prefix)
	if err != nil {
		return c.observe(res, gw.KindInvalidRequest, "", err.Error())
	}
	hdr := out.Header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Idempotency-Key", "og-"+c.id)
	return c.exchange(ctx, res, out, hdr)
}

// exchange sends one attempt's body and reads what comes back: a stream
// relayed as it arrives, a whole answer, or a failure to classify.
func (c *call) exchange(ctx context.Context, res *attemptResult, out *provider.Outbound, hdr http.Header) *attemptResult {
	res.prompt = out.PromptTokens
	hdr.Set("X-Oncegate-Request-Id", c.id)
	hdr.Set("X-Oncegate-Attempt", strconv.Itoa(res.ordinal))
	span := c.g.tracer.StartAttempt(c.spanCtx, res.route, res.ordinal, res.purpose, hdr)
	defer func() { tracing.EndAttempt(span, &res.obs, res.route) }()
	ctx, cancel := context.WithDeadline(ctx, c.deadline)
	defer cancel()
	resp, err := c.live.clients[res.route.Provider.ID].Do(ctx, &upstream.Request{Method: out.Method, Path: out.Path, Body: out.Body, Header: hdr})
	if err != nil {
		return c.transportFailure(res, err)
	}
	defer resp.Body.Close()
	c.g.load.Headers(res.route.ID, resp.Header)
	// The transport times the first byte on the wall clock; the receipt
	// keeps every time on the gateway's clock.
	fb := res.race.sawFirstByte(c.g.clock.Now().Add(-time.Since(resp.FirstByteAt)))
	res.obs.FirstByteAt = &fb
	res.obs.HTTPStatus = resp.Status
	if resp.Status/100 != 2 {
		return c.providerError(res, resp)
	}
	// From here on only res.prompt is read of out: the request's bytes
	// are not kept alive while its answer streams (docs/performance.md).
	if c.stream {
		return c.relay(ctx, res, resp)
	}
	return c.complete(res, resp)
}

// outputLimit is the output limit an attempt on route is sent with: what
// its reservation assumed — the client's max_tokens, else the alias's
// default_output_tokens, at most the route's max_output_tokens, the
// route's when neither is set — and, for a continuation, what is left of
// it after the output already delivered.
// So a provider that writes as much as it may costs no more than was
// reserved.
func (c *call) outputLimit(route *policy.Route, resume bool) int64 {
	limit := retry.OutputLimit(c.alias.Engine, c.alias.Engine.Route(route.ID), c.in.IR.MaxTokens)
	if resume && limit > 0 {
		limit = max(1, limit-c.out.emitted)
	}
	return limit
}

func (c *call) observe(res *attemptResult, k gw.Kind, cause gw.Cause, detail string) *attemptResult {
	res.kind, res.detail = k, detail
	res.obs.Kind, res.obs.Cause = k, cause
	res.obs.ObservedAt = c.g.clock.Now()
	if detail != "" && res.obs.Error == nil {
		res.obs.Error = &receipt.AttemptError{Message: truncate(detail, 300)}
	}
	return res
}

func (c *call) transportFailure(res *attemptResult, err error) *attemptResult {
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		return c.observe(res, gw.KindTimeoutBeforeResponse, "", err.Error())
	}
	res.sent = ue.Phase != upstream.PhaseConnect
	k, cause := ue.Kind()
	return c.observe(res, k, cause, ue.Error())
}

// providerError reads and classifies a non-2xx response.
func (c *call) providerError(res *attemptResult, resp *upstream.Response) *attemptResult {
	body, _ := upstream.ReadAll(resp.Body, maxErrorBody)
	ue, k, cause := c.live.clients[res.route.Provider.ID].ep.Fault(resp.Status, resp.Header, body)
	d, ok := retry.ParseRetryAfter(resp.Header, c.g.clock.Now())
	if !ok && ue.RetryDelay != "" {
		d, ok = retry.ParseRetryDelay(ue.RetryDelay) // Google's RetryInfo counts as Retry-After
	}
	if ok {
		d = receipt.HintFor(d)
		res.obs.RetryAfter = &d
	}
	if k == gw.KindAccountRefused {
		// The provider's text may echo the gateway's key: it is neither
		// passed on, nor kept, nor logged.
		what := "credential"
		if cause == gw.CauseQuota {
			what = "account for its quota or billing"
		}
		res.obs.Error = &receipt.AttemptError{Code: string(cause), Message: "the provider refused the gateway's " + what + " (HTTP " + strconv.Itoa(resp.Status) + ")"}
		return c.observe(res, k, cause, "")
	}
	scrubbed := c.g.scrubError(ue)
	res.obs.Error = &receipt.AttemptError{Code: cmp.Or(scrubbed.Code, scrubbed.Type), Message: truncate(scrubbed.Message, 300)}
	if k != gw.KindRouteUnavailable {
		// A broken route's error is the operator's to read, in the
		// receipt: it never reaches the client (docs/errors.md).
		res.upstreamErr = scrubbed
	}
	return c.observe(res, k, cause, "")
}

// complete reads a non-streamed success and renders it for the client:
// verbatim in the same protocol, translated otherwise.
func (c *call) complete(res *attemptResult, resp *upstream.Response) *attemptResult {
	body, err := upstream.ReadAll(resp.Body, c.g.policy().Limits.MaxResponseBytes)
	if err != nil {
		var ue *upstream.Error
		if errors.As(err, &ue) {
			return c.transportFailure(res, err)
		}
		return c.observe(res, gw.KindProtocolViolation, "", "response body: "+err.Error())
	}
	spec := res.route.Provider.Impl.Spec()
	ep := c.live.clients[res.route.Provider.ID].ep
	// The answer is already in the client's protocol: it goes verbatim
	// (an embeddings list is the embeddings protocol's, from any type
	// that serves it).
	verbatim := c.turn == nil && (spec.Protocol == c.proto || c.op() == provider.OpEmbeddings)
	if sc, ok := ep.(provider.Scanner); ok && verbatim {
		// Only its usage is read, in one pass that builds nothing; a body
		// the scan cannot vouch for is decoded below (docs/performance.md).
		if u, ok := sc.Scan(c.op(), body); ok {
			res.obs.Usage, res.obs.VisibleOutput, res.obs.EmittedTokens = u, true, u.OutputTokens
			res.body = body
			return c.observe(res, gw.KindOK, "", "")
		}
	}
	ir, err := ep.Decode(c.op(), body)
	if err != nil {
		return c.observe(res, gw.KindProtocolViolation, "", err.Error())
	}
	// An answer that does not name its model (Converse's) is the
	// route's model's; one that names no time (Converse's, Gemini's)
	// was created when the request was, as a stream's chunks say.
	ir.Model = cmp.Or(ir.Model, res.route.Model)
	if ir.Created == 0 {
		ir.Created = c.created.Unix()
	}
	res.obs.Usage = ir.Usage
	if c.turn != nil && spec.Stateful {
		c.turn.UpstreamID = ir.ID
	}
	if ir.Usage == (gw.Usage{}) {
		res.obs.Usage, res.obs.UsageEstimated = gw.Usage{InputTokens: res.prompt, OutputTokens: estimateOutput(ir)}, true
	}
	res.obs.VisibleOutput = true
	res.obs.EmittedTokens = res.obs.Usage.OutputTokens
	if verbatim {
		res.body = body
	} else {
		res.body = c.encodeResponse(ir)
	}
	return c.observe(res, gw.KindOK, "", "")
}

// encodeResponse writes a whole answer in the client's protocol.
func (c *call) encodeResponse(ir *provider.Response) []byte {
	if c.turn != nil {
		return provider.EncodeResponsesObject(&c.turn.Shell, ir, c.g.clock.Now().Unix())
	}
	return provider.EncodeResponse(c.proto, ir, provider.ResponseID(c.proto, c.id))
}

// estimateOutput is the output of an answer that names no usage: about
// four bytes a token, over every choice.
func estimateOutput(r *provider.Response) int64 {
	n := estimateChoice(r.Text, r.ToolCalls)
	for _, c := range r.Others {
		n += estimateChoice(c.Text, c.ToolCalls)
	}
	return n
}

func estimateChoice(text string, calls []provider.ToolCall) int64 {
	n := int64(len(text)+3) / 4
	for _, tc := range calls {
		n += int64(len(tc.Arguments)+3) / 4
	}
	return n
}
