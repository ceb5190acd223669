package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
	"github.com/oncegate/oncegate/internal/upstream"

	"go.opentelemetry.io/otel/trace"
)

// maxErrorBody bounds how much of a provider's error body is read.
const maxErrorBody = 64 << 10

// call is one logical request. It runs on its own goroutine, detached from
// any one client: its output goes to a flight that the owner and every
// joiner read, and it is cancelled only when all of them have left.
type call struct {
	g             *Gateway
	ctx           context.Context
	flight        *coord.Flight
	proto         provider.Protocol
	tenant        *policy.Tenant
	alias         *policy.Alias
	in            *provider.ClientRequest
	id            string
	identity      string
	requestSHA    string
	created       time.Time
	deadline      time.Time
	stream        bool
	streamEvents  bool
	anthropicBeta string
	clientRetries int
	rec           *receipt.Recorder
	log           *eventLog
	out           *output
	// followTo is the request another gateway runs for this identity,
	// which this call relays instead (set by claim); follows counts how
	// often the call went after one, so it never goes round forever.
	followTo *coord.Remote
	follows  int
	// live is the configuration the request started under: its provider
	// clients serve every attempt, whatever a reload changes meanwhile.
	live *live
	// access is the owner's log line, told how the request ended.
	access *accessLog
	// span is the logical request's trace span; spanCtx carries it.
	span    trace.Span
	spanCtx context.Context
	// dropped lists the request's fields a route of the other protocol
	// drops (may_drop, X-Oncegate-May-Drop; docs/translation.md).
	dropped []string
	// mayDrop lists the fields the alias and the request let a route drop.
	mayDrop []string
	// turn is the conversation turn this request is a try of (POST
	// /v1/responses); nil for chat.
	turn *turnCall
	// key is the request's virtual key (docs/keys.md); nil for none.
	key *keyCall
	// rateTaken: the tenant's rate was counted when the flight was
	// placed (a shared coordinator does it with the claim).
	rateTaken bool
	// finishing is set as the terminal is committed: a lease the store
	// reports lost from then on was lost to the terminal itself.
	finishing atomic.Bool
	// leaseLost is set when the store would not renew this call's lease:
	// it lapsed, and another gateway may have settled the request. The
	// call dispatches nothing more.
	leaseLost atomic.Bool
}

// loseLease marks the call's lease lost (see leaseLost).
func (c *call) loseLease() {
	if !c.leaseLost.Swap(true) && !c.finishing.Load() {
		c.g.log.Warn("lost the lease of a request in flight; it dispatches nothing more", "request_id", c.id)
	}
}

// errLeaseLost refuses a dispatch after the call's lease was lost.
var errLeaseLost = errors.New("the request's lease lapsed")

// attemptResult is what one attempt produced besides its observation.
type attemptResult struct {
	obs         receipt.Observation
	ordinal     int
	race        *raceSlot // nil: not hedged
	slot        int       // 0: the attempt, 1: its hedge
	prompt      int64     // prompt tokens sent
	finish      string    // a completed stream's finish reason
	kind        gw.Kind
	route       *policy.Route
	upstreamErr *provider.UpstreamError // a provider's error response
	detail      string                  // why, for logs and protocol violations
	body        []byte                  // non-streamed success: the client's body
	sent        bool                    // a transport failure after the request left
	purpose     string                  // why it was made: initial, retry, fallback …
}

// run drives the engine: admit the first attempt and claim the identity,
// then for each decided attempt wait for its not_before, acquire what it
// dispatches with (docs/overload.md), make it durable before it leaves, record
// what happened, until a terminal — committed before the clients get their
// last byte.
func (c *call) run() {
	ok, wait, err := true, time.Duration(0), error(nil)
	if !c.rateTaken {
		ok, wait, err = c.g.tenants.Take(c.tenant.ID)
	}
	c.rateTaken = false // a later run of this call (a new request after a follow) is counted
	if err != nil {
		e := errorf(CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
		e.retryAfter = 1
		c.publishError(e, meta{})
		return
	}
	if !ok {
		c.rateLimited(wait)
		return
	}
	adm := c.admission(false)
	d, p, err := c.admit(c.rec.Start(adm, c.created), adm)
	if err != nil {
		c.abort(err)
		return
	}
	if !c.claim(d) {
		c.release(p, nil)
		if c.followTo != nil {
			c.follow(c.followTo)
		}
		return
	}
	if d.Dispatches() {
		c.g.budget.First(c.providerOf(d.Route))
	}
	failpoint("after_dispatch_commit")
	var last *attemptResult
	for d.Dispatches() {
		if p == nil { // a later attempt: wait for it, then admit it
			if !c.sleepUntil(d.NotBefore) {
				c.rec.Cancel()
				break
			}
			if d, p, err = c.admit(d, c.admission(true)); err != nil {
				c.abort(err)
				return
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
				return
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
			return
		}
		p, last = nil, res
		if d.Dispatches() && c.out.started {
			c.out.between(d, len(c.rec.R.Attempts)+1)
		}
	}
	c.finish(d, last)
}

// rateLimited refuses a new logical request of a tenant over its rate.
func (c *call) rateLimited(wait time.Duration) {
	c.g.metrics.ObserveTenantRejection(c.tenant.ID, CodeTenantRateLimited)
	e := errorf(CodeTenantRateLimited, "tenant %s is over its %d requests per minute", c.tenant.ID, c.tenant.RequestsPerMinute)
	e.retryAfter = int(math.Ceil(max(1, wait.Seconds())))
	c.publishError(e, meta{})
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
		c.log.later(ledger.EvObserved, a.ObservedAt, a, receiptRef{InReceipt: true, Ordinal: a.Ordinal})
	}
	at := r.Attempts[len(r.Attempts)-1].ObservedAt
	d := r.Decisions[len(r.Decisions)-1]
	c.log.later(ledger.EvDecision, at, d, receiptRef{InReceipt: true, AfterAttempt: d.AfterAttempt})
}

// receiptRef is the payload of an event whose content the receipt beside
// it holds: which attempt or decision of it.
type receiptRef struct {
	InReceipt    bool `json:"in_receipt"`
	Ordinal      int  `json:"ordinal,omitempty"`
	AfterAttempt int  `json:"after_attempt,omitempty"`
}

// dispatchEvents are attempt n's reserved and dispatched events: durable
// before its bytes leave (docs/identity.md).
func (c *call) dispatchEvents(d retry.Decision, n int) []ledger.Event {
	de := dispatchEvent{Ordinal: n, Route: d.Route, Purpose: string(d.Purpose()), NotBefore: d.NotBefore.UTC(), ReserveUSD: d.Reserve.USD()}
	now := c.g.clock.Now()
	return []ledger.Event{c.log.event(ledger.EvReserved, now, de), c.log.event(ledger.EvDispatch, now, de)}
}

// abort ends a call the engine or the ledger refused (a fenced-off owner,
// an internal error): nothing more is sent upstream.
//
// The call stops holding its lease: if no terminal could be committed,
// the lease lapses and recovery settles the request — indeterminate if an
// attempt is in flight, released otherwise — never re-dispatched.
func (c *call) abort(err error) {
	c.g.live.Delete(c.id)
	c.g.log.Error("request aborted", "request_id", c.id, "err", err)
	e := errorf(CodeInternal, "internal error (request %s)", c.id)
	switch {
	case errors.Is(err, ledger.ErrStaleGeneration) || errors.Is(err, ledger.ErrFinished) || errors.Is(err, errLeaseLost):
		e = errorf(CodeOutcomeUnknown, "another owner took this request over; its outcome is theirs")
	case errors.Is(err, errStore):
		c.g.store.failed(err)
		// An attempt may have been sent: its outcome could not be
		// recorded, and the request is settled once the store is back
		// (indeterminate if an attempt was in flight). The client must
		// not send it again blind.
		e = errorf(CodeStoreUnavailable, "the gateway's store became unreachable while this request ran; its outcome is unknown")
		e.noRetry = len(c.rec.R.Attempts) > 0 || c.log != nil && c.log.seq > 1
	}
	finish := c.flight.Finish
	if errors.Is(err, errStore) {
		// No terminal could be recorded: the request is abandoned. Its
		// lease is given up once the store answers, and every gateway
		// then says the same of it (docs/replicas.md).
		finish = c.flight.Abandon
		c.g.abandoned.Store(c.id, struct{}{})
	}
	if c.out != nil && c.out.started {
		// The client already reads a stream: end it with the protocol's
		// in-band error, not a JSON body after its last frame. Output was
		// shown and no terminal recorded, so recovery settles the request
		// indeterminate once its lease lapses; the error says so.
		c.out.flush()
		cs := codeStatus[e.code]
		finish(nil, c.out.enc.Error(nil, &provider.ClientError{Type: cs.typ, Code: e.code, Message: e.message, RequestID: c.id,
			Terminal: string(gw.TerminalIndeterminate), Reason: string(gw.ReasonIndeterminate), EmittedTokens: c.out.emitted}))
		return
	}
	head, body := e.render(c.proto, c.meta())
	finish(head, body)
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

func (c *call) meta() meta {
	r := c.rec.R
	return meta{requestID: c.id, attempts: len(r.Attempts), terminal: gw.Terminal(r.Terminal), reason: gw.Reason(r.Reason)}
}

// publishError ends the flight with an error response.
func (c *call) publishError(e *apiError, m meta) {
	head, body := e.render(c.proto, m)
	c.flight.Finish(head, body)
}

// finish commits the terminal and answers every subscriber: the stored
// response goes to the ledger in the same commit as the terminal event and
// the receipt, before the final bytes go out.
func (c *call) finish(d retry.Decision, last *attemptResult) {
	r := c.rec.R
	r.Dedup.Joined = c.flight.Joined()
	r.ClientRetryCount = max(r.ClientRetryCount, c.clientRetries, c.flight.ClientRetries())
	r.Totals = r.ComputeTotals()
	head, tail := c.answer(d, last)
	if c.turn != nil {
		c.conversationFacts()
	}
	state := ledgerState(gw.Terminal(r.Terminal))
	var stored *ledger.Response
	if head != nil || c.out.started {
		body, _ := c.flight.Output()
		stored = &ledger.Response{Status: http.StatusOK, ContentType: "text/event-stream", Attempts: len(r.Attempts),
			Body: append(append([]byte(nil), body...), tail...)}
		if head != nil {
			stored.Status, stored.ContentType = head.Status, head.Header.Get("Content-Type")
			stored.Route = head.Header.Get("X-Oncegate-Route")
		}
	}
	if err := c.commit(state, stored); err != nil {
		c.abort(err)
		return
	}
	if c.turn != nil {
		c.settleTurn(head, tail, last)
	}
	c.g.live.Delete(c.id)
	c.noteAccess()
	c.flight.Finish(head, tail)
	if extra := c.flight.Joined() - r.Dedup.Joined; extra > 0 {
		_ = c.g.ledger.AddDedup(context.Background(), c.tenant.ID, c.id, extra, 0, c.flight.ClientRetries())
	}
	c.observeMetrics()
}

// noteAccess tells the owner's log line how the request ended: before its
// last byte, so the line has it.
func (c *call) noteAccess() {
	if c.access == nil {
		return
	}
	r := c.rec.R
	routes := make([]string, len(r.Attempts))
	for i, a := range r.Attempts {
		routes[i] = a.Route
	}
	c.access.set(func(a *accessLog) {
		a.requestID, a.attempts, a.routes, a.terminal, a.reason = c.id, len(r.Attempts), routesOf(routes), r.Terminal, r.Reason
		a.tokens, a.costUSD = r.Totals.BillableTokens, r.Totals.CostUSD
	})
}

// observeMetrics counts the finished request and each of its attempts.
func (c *call) observeMetrics() {
	r, m := c.rec.R, c.g.metrics
	m.ObserveRequest(metrics.Request{Tenant: r.Tenant, Model: r.Model, Terminal: r.Terminal, Reason: r.Reason, Attempts: len(r.Attempts),
		Duration: c.g.clock.Now().Sub(c.created)})
	if last := c.rec.Last(); last.Reason == gw.ReasonCostBudget && last.TenantBound {
		m.ObserveTenantRejection(c.tenant.ID, CodeTenantBudget)
	}
	output := false
	for i := range r.Attempts {
		a := &r.Attempts[i]
		ma := metrics.Attempt{Tenant: r.Tenant, Route: a.Route, Provider: a.Provider, Class: a.OutcomeClass, Kind: a.Kind,
			Purpose: a.Purpose, AfterOutput: output, VisibleOutput: a.VisibleOutput,
			Input: a.Usage.InputTokens, Output: a.Usage.OutputTokens, CostUSD: a.CostUSD}
		if i > 0 {
			ma.Cause = r.Attempts[i-1].Kind
		}
		if a.FirstByteAt != nil {
			ma.TTFT = a.FirstByteAt.Sub(a.StartedAt)
		}
		m.ObserveAttempt(ma)
		output = output || a.VisibleOutput
	}
}

// answer renders the final response: for a stream that is visible, the
// last frames; otherwise a whole response head and body.
func (c *call) answer(d retry.Decision, last *attemptResult) (*coord.Head, []byte) {
	switch {
	case d.Action == retry.ActionComplete && c.stream:
		return c.out.complete(last.route, last.finish, c.billed())
	case d.Action == retry.ActionComplete:
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		setIDHeaders(h, c.id, len(c.rec.R.Attempts))
		h.Set("X-Oncegate-Route", last.route.ID)
		setDropped(h, c.droppedOn(last.route))
		return &coord.Head{Status: http.StatusOK, Header: h}, last.body
	case c.out.started:
		return nil, c.out.interrupt(d)
	case d.Terminal == gw.TerminalCancelled:
		return errorf(CodeInternal, "the client went away").render(c.proto, c.meta())
	}
	return c.terminalError(d, last).render(c.proto, c.meta())
}

// ledgerState maps a terminal to the ledger record state (docs/identity.md).
func ledgerState(t gw.Terminal) ledger.State {
	switch t {
	case gw.TerminalSucceeded:
		return ledger.Succeeded
	case gw.TerminalIndeterminate:
		return ledger.Indeterminate
	}
	return ledger.FailedNoEffect
}

// commit writes the terminal, the stored response and the receipt in one
// durable commit. A request that dispatched nothing, or was cancelled
// before any output reached a client, releases its identity instead: the
// key may be used again. One cancelled after output did reach a client
// keeps its key, indeterminate: once output was visible a key is never
// released.
func (c *call) commit(state ledger.State, stored *ledger.Response) error {
	c.finishing.Store(true)
	r := c.rec.R
	body, err := r.JSON()
	if err != nil {
		return err
	}
	now := c.g.clock.Now()
	term := c.log.event(ledger.EvTerminal, now, map[string]string{"terminal": r.Terminal, "reason": r.Reason})
	release := len(r.Attempts) == 0 // a refusal before any dispatch protects nothing
	if r.Terminal == string(gw.TerminalCancelled) {
		if c.visible() {
			// The client left after output it may have shown: the key is
			// never released, and never answered with a part of an answer.
			state = ledger.Indeterminate
		} else {
			release = true // nothing was shown: the key may be used again
		}
	}
	return storeErr(c.g.ledger.Finish(context.Background(), &ledger.Finish{Identity: c.identity, RequestID: c.id, Generation: c.log.gen,
		State: state, Response: stored, At: now, Events: append(c.log.take(true), term), Receipt: body, Tenant: c.tenant.ID, Key: r.KeyID,
		Charge: int64(gw.NanoFromUSD(r.Totals.CostUSD)), Release: release}))
}

// visible reports whether any output of the request reached a client:
// a stream that started (a whole answer reaches clients only as it is
// committed).
func (c *call) visible() bool { return c.out.started }

// billed sums every attempt's usage: what the client is charged.
func (c *call) billed() gw.Usage {
	var u gw.Usage
	for _, a := range c.rec.R.Attempts {
		u = u.Add(a.Usage)
	}
	return u
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
	span := c.startAttemptSpan(res.route, res.ordinal, res.purpose, hdr)
	defer func() { endAttemptSpan(span, res) }()
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
	if c.stream {
		return c.relay(ctx, res, resp, out)
	}
	return c.complete(res, resp, out)
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
	if d, ok := retry.ParseRetryAfter(resp.Header, c.g.clock.Now()); ok {
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
	res.upstreamErr = c.g.scrubError(ue)
	res.obs.Error = &receipt.AttemptError{Code: firstNonEmpty(ue.Code, ue.Type), Message: truncate(ue.Message, 300)}
	return c.observe(res, k, cause, "")
}

// complete reads a non-streamed success and renders it for the client:
// verbatim in the same protocol, translated otherwise.
func (c *call) complete(res *attemptResult, resp *upstream.Response, out *provider.Outbound) *attemptResult {
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
	// route's model's.
	ir.Model = firstNonEmpty(ir.Model, res.route.Model)
	res.obs.Usage = ir.Usage
	if c.turn != nil && spec.Stateful {
		c.turn.upstreamID = ir.ID
	}
	if ir.Usage == (gw.Usage{}) {
		res.obs.Usage, res.obs.UsageEstimated = gw.Usage{InputTokens: out.PromptTokens, OutputTokens: estimateOutput(ir)}, true
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
		return provider.EncodeResponsesObject(&c.turn.shell, ir, c.g.clock.Now().Unix())
	}
	return provider.EncodeResponse(c.proto, ir, provider.ResponseID(c.proto, c.id))
}

func estimateOutput(r *provider.Response) int64 {
	n := int64(len(r.Text)+3) / 4
	for _, tc := range r.ToolCalls {
		n += int64(len(tc.Arguments)+3) / 4
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
