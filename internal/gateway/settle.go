package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/retry"
)

// settle is stage 6: it commits the terminal and answers every
// subscriber. The stored response goes to the ledger in the same commit
// as the terminal event and the receipt, before the final bytes go out.
func (c *call) settle(d retry.Decision, last *attemptResult) {
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
		stored = &ledger.Response{Status: http.StatusOK, ContentType: "text/event-stream", Attempts: len(r.Attempts)}
		if head != nil {
			stored.Status, stored.ContentType = head.Status, head.Header.Get("Content-Type")
			stored.Route = head.Header.Get("X-Oncegate-Route")
		}
		c.stage(stored, tail)
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

// stage puts the flight's output and its tail in stored: the flight's own
// array, which Finish publishes, with the ledger's header written in the
// room before it — so neither the store nor the flight copies the answer.
func (c *call) stage(stored *ledger.Response, tail []byte) {
	if prefix, err := ledger.ResponsePrefix(stored); err == nil {
		if enc := c.flight.StagePrefixed(tail, prefix); enc != nil {
			stored.Encoded, stored.Body = enc, enc[len(prefix):]
			return
		}
	}
	stored.Body = c.flight.Stage(tail)
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
		api.SetIDHeaders(h, c.id, len(c.rec.R.Attempts))
		h.Set("X-Oncegate-Route", last.route.ID)
		api.SetDropped(h, c.droppedOn(last.route))
		return &coord.Head{Status: http.StatusOK, Header: h}, last.body
	case c.out.started:
		return nil, c.out.interrupt(d)
	case d.Terminal == gw.TerminalCancelled:
		return api.Errorf(api.CodeInternal, "the client went away").Render(c.proto, c.meta())
	}
	return c.terminalError(d, last).Render(c.proto, c.meta())
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
	term := c.log.event(ledger.EvTerminal, now, ledger.TerminalEvent{Terminal: r.Terminal, Reason: r.Reason})
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
		State: state, Response: stored, At: now, Events: append(c.log.take(true), term), Receipt: body, Facts: r.SpendFacts(), Tenant: c.tenant.ID, Key: r.KeyID,
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
	c.access.Set(func(a *accesslog.Entry) {
		a.RequestID, a.Attempts, a.Routes, a.Terminal, a.Reason = c.id, len(r.Attempts), accesslog.RoutesOf(routes), r.Terminal, r.Reason
		a.Tokens, a.CostUSD = r.Totals.BillableTokens, r.Totals.CostUSD
	})
}

// observeMetrics counts the finished request and each of its attempts.
func (c *call) observeMetrics() {
	r, m := c.rec.R, c.g.metrics
	m.ObserveRequest(metrics.Request{Tenant: r.Tenant, Model: r.Model, Terminal: r.Terminal, Reason: r.Reason, Attempts: len(r.Attempts),
		Duration: c.g.clock.Now().Sub(c.created)})
	if last := c.rec.Last(); last.Reason == gw.ReasonCostBudget && last.TenantBound {
		m.ObserveTenantRejection(c.tenant.ID, api.CodeTenantBudget)
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

// abort ends a call the engine or the ledger refused (a fenced-off owner,
// an internal error): nothing more is sent upstream.
//
// The call stops holding its lease: if no terminal could be committed,
// the lease lapses and recovery settles the request — indeterminate if an
// attempt is in flight, released otherwise — never re-dispatched.
func (c *call) abort(err error) {
	c.g.live.Delete(c.id)
	c.g.log.Error("request aborted", "request_id", c.id, "err", err)
	e := api.Errorf(api.CodeInternal, "internal error (request %s)", c.id)
	switch {
	case errors.Is(err, ledger.ErrStaleGeneration) || errors.Is(err, ledger.ErrFinished) || errors.Is(err, errLeaseLost):
		e = api.Errorf(api.CodeOutcomeUnknown, "another owner took this request over; its outcome is theirs")
	case errors.Is(err, errStore):
		c.g.store.Failed(err)
		// An attempt may have been sent: its outcome could not be
		// recorded, and the request is settled once the store is back
		// (indeterminate if an attempt was in flight). The client must
		// not send it again blind.
		e = api.Errorf(api.CodeStoreUnavailable, "the gateway's store became unreachable while this request ran; its outcome is unknown")
		e.NoRetry = len(c.rec.R.Attempts) > 0 || c.log != nil && c.log.seq > 1
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
		finish(nil, c.out.enc.Error(nil, &provider.ClientError{Type: api.ErrorType(e.Code, provider.OpenAI), Code: e.Code, Message: e.Message, RequestID: c.id,
			Terminal: string(gw.TerminalIndeterminate), Reason: string(gw.ReasonIndeterminate), EmittedTokens: c.out.emitted}))
		return
	}
	head, body := e.Render(c.proto, c.meta())
	finish(head, body)
}
