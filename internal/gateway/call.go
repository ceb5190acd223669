package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
	"github.com/oncegate/oncegate/internal/upstream"
)

// maxErrorBody bounds how much of a provider's error body is read.
const maxErrorBody = 64 << 10

// call is one logical request in flight. It runs on its handler's
// goroutine and is not shared.
type call struct {
	g            *Gateway
	w            http.ResponseWriter
	r            *http.Request
	proto        provider.Protocol
	tenant       *policy.Tenant
	alias        *policy.Alias
	in           *provider.ClientRequest
	id           string
	created      time.Time
	deadline     time.Time
	stream       bool
	streamEvents bool
	rec          *receipt.Recorder
	out          *output
	lastFinish   string // the finish reason of the stream that completed
}

// attemptResult is what one attempt produced besides its observation.
type attemptResult struct {
	obs         receipt.Observation
	kind        gw.Kind
	route       *policy.Route
	upstreamErr *provider.UpstreamError // a provider's error response
	detail      string                  // why, for logs and protocol violations
	body        []byte                  // non-streamed success: the client's body
}

// run drives the engine: wait for each decided attempt's not_before, make
// the attempt, record it, and act on the next decision, until a terminal.
func (c *call) run() {
	adm := retry.Admission{}
	d := c.rec.Start(adm, c.created)
	var last *attemptResult
	for d.Dispatches() {
		if !c.sleepUntil(d.NotBefore) {
			c.rec.Cancel()
			break
		}
		last = c.attempt(d)
		var err error
		if d, err = c.rec.Observe(last.obs, adm); err != nil {
			c.g.log.Error("engine refused an attempt", "request_id", c.id, "err", err)
			errorf(CodeInternal, "internal error (request %s)", c.id).write(c.w, c.proto, c.meta())
			return
		}
		if d.Dispatches() && c.out.started {
			c.out.between(d, len(c.rec.R.Attempts)+1)
		}
	}
	// The receipt is stored before the client gets its last byte, so a
	// client that asks for it at once finds it. Its digests are computed
	// when it is read, off this path.
	c.rec.R.Totals = c.rec.R.ComputeTotals()
	if err := c.g.receipts.Put(c.rec.R); err != nil {
		c.g.log.Error("store receipt", "request_id", c.id, "err", err)
	}
	c.finish(d, last)
	c.g.log.Info("request", "request_id", c.id, "tenant", c.tenant.ID, "model", c.alias.Name,
		"attempts", len(c.rec.R.Attempts), "terminal", c.rec.R.Terminal, "reason", c.rec.R.Reason)
}

// sleepUntil waits for t, or returns false if the client left first.
func (c *call) sleepUntil(t time.Time) bool {
	for {
		d := t.Sub(c.g.clock.Now())
		if d <= 0 {
			return c.r.Context().Err() == nil
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-c.r.Context().Done():
			timer.Stop()
			return false
		}
	}
}

func (c *call) meta() meta {
	r := c.rec.R
	return meta{requestID: c.id, attempts: len(r.Attempts), terminal: gw.Terminal(r.Terminal), reason: gw.Reason(r.Reason)}
}

// finish answers the client once the engine reached a terminal.
func (c *call) finish(d retry.Decision, last *attemptResult) {
	switch {
	case d.Action == retry.ActionComplete && c.stream:
		c.out.complete(last.route, c.billed())
	case d.Action == retry.ActionComplete:
		h := c.w.Header()
		h.Set("Content-Type", "application/json")
		setIDHeaders(h, c.id, len(c.rec.R.Attempts))
		h.Set("X-Oncegate-Route", last.route.ID)
		h.Set("X-Oncegate-Dedup", "miss")
		c.w.WriteHeader(http.StatusOK)
		_, _ = c.w.Write(last.body)
	case d.Terminal == gw.TerminalCancelled || c.r.Context().Err() != nil:
		// The client is gone: nobody to answer.
	case c.out.started:
		c.out.interrupt(d)
	default:
		terminalError(d.Terminal, d.Reason, last).write(c.w, c.proto, c.meta())
	}
}

// billed sums every attempt's usage: what the client is charged.
func (c *call) billed() gw.Usage {
	var u gw.Usage
	for _, a := range c.rec.R.Attempts {
		u = u.Add(a.Usage)
	}
	return u
}

func upstreamProtocol(t policy.ProviderType) provider.Protocol {
	if t == policy.TypeAnthropic {
		return provider.Anthropic
	}
	return provider.OpenAI
}

func upstreamPath(t policy.ProviderType) string {
	if t == policy.TypeAnthropic {
		return "/v1/messages"
	}
	return "/chat/completions"
}

// attempt makes one physical attempt on the decided route.
func (c *call) attempt(d retry.Decision) *attemptResult {
	route := c.alias.Route(d.Route)
	res := &attemptResult{route: route}
	up := upstreamProtocol(route.Provider.Type)
	target := provider.Target{Protocol: up, Model: route.Model, Stream: c.stream,
		MaxOutputTokens: route.Caps.MaxOutputTokens, Continuation: string(route.Caps.Continuation)}
	var prefix *string
	if d.Action == retry.ActionResume {
		p := c.out.prefix()
		prefix = &p
	}
	started := c.g.clock.Now()
	res.obs = receipt.Observation{StartedAt: started, Breaker: receipt.BreakerState{State: "closed"}}
	built, err := provider.BuildRequest(c.in, target, prefix)
	if err != nil {
		return c.observe(res, gw.KindInvalidRequest, "", err.Error())
	}
	ordinal := len(c.rec.R.Attempts) + 1
	hdr := http.Header{}
	hdr.Set("Idempotency-Key", "og-"+c.id)
	hdr.Set("X-Oncegate-Request-Id", c.id)
	hdr.Set("X-Oncegate-Attempt", strconv.Itoa(ordinal))
	if up == provider.Anthropic && c.proto == provider.Anthropic {
		if beta := c.r.Header.Get("anthropic-beta"); beta != "" {
			hdr.Set("anthropic-beta", beta)
		}
	}
	ctx, cancel := context.WithDeadline(c.r.Context(), c.deadline)
	defer cancel()
	resp, err := c.g.clients[route.Provider.ID].Do(ctx, &upstream.Request{Path: upstreamPath(route.Provider.Type), Body: built.Body, Header: hdr})
	if err != nil {
		return c.transportFailure(res, err)
	}
	defer resp.Body.Close()
	fb := resp.FirstByteAt
	res.obs.FirstByteAt = &fb
	res.obs.HTTPStatus = resp.Status
	if resp.Status/100 != 2 {
		return c.providerError(res, resp)
	}
	if c.stream {
		return c.relay(ctx, res, resp, up, built)
	}
	return c.complete(res, resp, up, built)
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
	k, cause := ue.Kind()
	return c.observe(res, k, cause, ue.Error())
}

// providerError reads and classifies a non-2xx response.
func (c *call) providerError(res *attemptResult, resp *upstream.Response) *attemptResult {
	body, _ := upstream.ReadAll(resp.Body, maxErrorBody)
	ue := provider.ParseError(resp.Status, body)
	k, cause := provider.Classify(ue)
	if d, ok := retry.ParseRetryAfter(resp.Header, c.g.clock.Now()); ok {
		d = receipt.HintFor(d)
		res.obs.RetryAfter = &d
	}
	res.upstreamErr = ue
	res.obs.Error = &receipt.AttemptError{Code: firstNonEmpty(ue.Code, ue.Type), Message: truncate(ue.Message, 300)}
	return c.observe(res, k, cause, "")
}

// complete reads a non-streamed success and renders it for the client:
// verbatim in the same protocol, translated otherwise.
func (c *call) complete(res *attemptResult, resp *upstream.Response, up provider.Protocol, built *provider.Built) *attemptResult {
	body, err := upstream.ReadAll(resp.Body, c.g.pol.Limits.MaxResponseBytes)
	if err != nil {
		var ue *upstream.Error
		if errors.As(err, &ue) {
			return c.transportFailure(res, err)
		}
		return c.observe(res, gw.KindProtocolViolation, "", "response body: "+err.Error())
	}
	ir, err := provider.DecodeResponse(up, body)
	if err != nil {
		return c.observe(res, gw.KindProtocolViolation, "", err.Error())
	}
	res.obs.Usage = ir.Usage
	if ir.Usage == (gw.Usage{}) {
		res.obs.Usage, res.obs.UsageEstimated = gw.Usage{InputTokens: built.PromptTokens, OutputTokens: estimateOutput(ir)}, true
	}
	res.obs.VisibleOutput = true
	res.obs.EmittedTokens = res.obs.Usage.OutputTokens
	if up == c.proto {
		res.body = body
	} else {
		res.body = provider.EncodeResponse(c.proto, ir, provider.ResponseID(c.proto, c.id))
	}
	return c.observe(res, gw.KindOK, "", "")
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
