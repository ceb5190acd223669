package gateway

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// Client-facing error codes (docs/errors.md): a closed vocabulary, separate
// from outcome kinds, that sets the status and x-should-retry.
const (
	CodeInvalidRequest     = "invalid_request"
	CodeInvalidKey         = "invalid_idempotency_key"
	CodeUnauthorized       = "unauthorized"
	CodeModelNotFound      = "model_not_found"
	CodeReceiptNotFound    = "receipt_not_found"
	CodeUpstreamAuthFailed = "upstream_auth_failed"
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeKeyInUse           = "idempotency_key_in_use"
	CodeKeyExpired         = "idempotency_key_expired"
	CodeKeyReused          = "idempotency_key_reused"
	CodeTenantRateLimited  = "tenant_rate_limited"
	CodeTenantBudget       = "tenant_budget_exceeded"
	CodeTenantPending      = "tenant_budget_pending"
	CodeTenantConcurrency  = "tenant_concurrency_limited"
	// A virtual key's own limits (docs/keys.md).
	CodeModelNotAllowed     = "model_not_allowed"
	CodeKeyRateLimited      = "key_rate_limited"
	CodeKeyBudget           = "key_budget_exceeded"
	CodeKeyConcurrency      = "key_concurrency_limited"
	CodeForbidden           = "forbidden"
	CodeOutcomeUnknown      = "outcome_unknown"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodeCircuitOpen         = "circuit_open"
	CodeRetryBudget         = "retry_budget_exhausted"
	CodeDeadline            = "deadline_exceeded"
	CodeProtocolViolation   = "upstream_protocol_violation"
	CodeRequestTooLarge     = "request_too_large"
	CodeRequestTimeout      = "request_timeout"
	CodeInternal            = "internal_error"
	// A part of the gateway is down and nothing was sent: come back.
	CodeResponseNotFound        = "response_not_found"
	CodeConversationBusy        = "conversation_busy"
	CodeStoreUnavailable        = "store_unavailable"
	CodeCoordinationUnavailable = "coordination_unavailable"
	CodeDraining                = "draining"

	// The admin API's conditional writes of a key (docs/keys.md).
	CodeKeyRevoked         = "key_revoked"
	CodeKeyConflict        = "key_conflict"
	CodePreconditionFailed = "precondition_failed"
)

// CodeRouteUnavailable: every route left was broken — its model or
// deployment missing at the provider, or its path not served
// (docs/errors.md). Like upstream_auth_failed, the operator's to fix and
// never the provider's text.
const CodeRouteUnavailable = "upstream_route_unavailable"

// codeStatus is each gateway code's HTTP status and whether a client may
// retry it (x-should-retry).
var codeStatus = map[string]struct {
	status int
	retry  bool
	typ    string // error type in OpenAI's vocabulary
	anType string // error type in Anthropic's vocabulary
}{
	CodeInvalidRequest:          {400, false, "invalid_request_error", "invalid_request_error"},
	CodeInvalidKey:              {400, false, "invalid_request_error", "invalid_request_error"},
	CodeRequestTooLarge:         {413, false, "invalid_request_error", "request_too_large"},
	CodeRequestTimeout:          {408, false, "invalid_request_error", "invalid_request_error"},
	CodeUnauthorized:            {401, false, "authentication_error", "authentication_error"},
	CodeModelNotFound:           {404, false, "invalid_request_error", "not_found_error"},
	CodeReceiptNotFound:         {404, false, "invalid_request_error", "not_found_error"},
	CodeUpstreamAuthFailed:      {502, false, "api_error", "api_error"},
	CodeRouteUnavailable:        {502, false, "api_error", "api_error"},
	CodeNotFound:                {404, false, "invalid_request_error", "not_found_error"},
	CodeMethodNotAllowed:        {405, false, "invalid_request_error", "invalid_request_error"},
	CodeKeyInUse:                {409, true, "invalid_request_error", "invalid_request_error"},
	CodeResponseNotFound:        {404, false, "invalid_request_error", "not_found_error"},
	CodeConversationBusy:        {409, true, "invalid_request_error", "invalid_request_error"},
	CodeKeyExpired:              {409, false, "invalid_request_error", "invalid_request_error"},
	CodeKeyReused:               {422, false, "invalid_request_error", "invalid_request_error"},
	CodeTenantRateLimited:       {429, true, "rate_limit_error", "rate_limit_error"},
	CodeTenantBudget:            {429, false, "rate_limit_error", "rate_limit_error"},
	CodeTenantPending:           {429, true, "rate_limit_error", "rate_limit_error"},
	CodeTenantConcurrency:       {429, true, "rate_limit_error", "rate_limit_error"},
	CodeModelNotAllowed:         {403, false, "permission_error", "permission_error"},
	CodeForbidden:               {403, false, "permission_error", "permission_error"},
	CodeKeyRateLimited:          {429, true, "rate_limit_error", "rate_limit_error"},
	CodeKeyBudget:               {429, false, "rate_limit_error", "rate_limit_error"},
	CodeKeyConcurrency:          {429, true, "rate_limit_error", "rate_limit_error"},
	CodeKeyRevoked:              {409, false, "invalid_request_error", "invalid_request_error"},
	CodeKeyConflict:             {409, false, "invalid_request_error", "invalid_request_error"},
	CodePreconditionFailed:      {412, false, "invalid_request_error", "invalid_request_error"},
	CodeOutcomeUnknown:          {502, false, "api_error", "api_error"},
	CodeProtocolViolation:       {502, false, "api_error", "api_error"},
	CodeUpstreamUnavailable:     {503, false, "api_error", "overloaded_error"},
	CodeCircuitOpen:             {503, false, "api_error", "overloaded_error"},
	CodeRetryBudget:             {503, false, "api_error", "overloaded_error"},
	CodeDeadline:                {504, false, "api_error", "api_error"},
	CodeInternal:                {500, false, "api_error", "api_error"},
	CodeStoreUnavailable:        {503, true, "api_error", "overloaded_error"},
	CodeCoordinationUnavailable: {503, true, "api_error", "overloaded_error"},
	CodeDraining:                {503, true, "api_error", "overloaded_error"},
}

// apiError is an error on its way to a client.
type apiError struct {
	code       string
	message    string
	param      string
	retryAfter int // seconds; 0: no Retry-After header
	// noRetry sends x-should-retry: false whatever the code says: an
	// attempt was already sent, so a client's retry could pay twice.
	noRetry bool
	// pending sends x-should-retry: true for a code that alone says
	// false: a budget refused only while requests in flight hold its
	// rest (key_budget_exceeded, docs/keys.md).
	pending bool
	// upstream, when set, is a provider's non-retryable error passed
	// through with its own status, type and code (after sanitising).
	upstream *provider.UpstreamError
}

func errorf(code, format string, args ...any) *apiError {
	return &apiError{code: code, message: fmt.Sprintf(format, args...)}
}

// meta is the oncegate block and headers every error carries.
type meta struct {
	requestID string
	attempts  int
	terminal  gw.Terminal
	reason    gw.Reason
	// dedup, when set, is the answer's X-Oncegate-Dedup: "joined" for an
	// arrival told how the request it joined ended.
	dedup string
}

// render returns e in the client's protocol: status and headers, and the
// body with the oncegate block.
func (e *apiError) render(p provider.Protocol, m meta) (*coord.Head, []byte) {
	ce := &provider.ClientError{Code: e.code, Message: e.message, Param: e.param,
		RequestID: m.requestID, Attempts: m.attempts, Terminal: string(m.terminal), Reason: string(m.reason)}
	cs, ok := codeStatus[e.code]
	if !ok {
		cs = codeStatus[CodeInternal]
	}
	ce.Status, ce.Type = cs.status, cs.typ
	if p == provider.Anthropic {
		ce.Type = cs.anType
	}
	retry := (cs.retry || e.pending) && !e.noRetry
	if u := e.upstream; u != nil {
		ce.Status, ce.Type, ce.Code, ce.Message, ce.Param, retry = u.Status, u.Type, u.Code, u.Message, u.Param, false
		if ce.Type == "" {
			ce.Type = cs.typ
		}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", strconv.FormatBool(retry))
	setIDHeaders(h, m.requestID, m.attempts)
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	return &coord.Head{Status: ce.Status, Header: h, Code: e.code, Dedup: m.dedup}, provider.EncodeError(p, ce)
}

// write sends e straight to a client (errors before any logical request).
func (e *apiError) write(w http.ResponseWriter, p provider.Protocol, m meta) {
	noteCode(w, e.code)
	head, body := e.render(p, m)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	writeHead(w, head, "")
	_, _ = w.Write(body)
}

// setDropped names, in X-Oncegate-Dropped, the request's fields the
// answering route did not carry (docs/translation.md).
func setDropped(h http.Header, fields []string) {
	if len(fields) > 0 {
		h.Set("X-Oncegate-Dropped", strings.Join(fields, ", "))
	}
}

func setIDHeaders(h http.Header, requestID string, attempts int) {
	if requestID != "" {
		h.Set("X-Oncegate-Request-Id", requestID)
		h.Set("X-Oncegate-Attempts", strconv.Itoa(attempts))
	}
}

// tenantBudgetError is the refusal of a request whose next attempt's
// worst case does not fit under its tenant's daily ceiling, after n
// attempts. If what the tenant was charged leaves room for it, only
// reservations of requests in flight are in the way, and they settle for
// less than they hold: 429 tenant_budget_pending, come back in about the
// time they take. Only charges that leave no room are the day's answer,
// 429 tenant_budget_exceeded until midnight UTC (docs/overload.md). A
// request that already made attempts has its terminal replayed to its
// key, so it is not told to come back: 503 upstream_unavailable.
func (c *call) tenantBudgetError(n int) *apiError {
	if e := c.keyBudgetError(n); e != nil {
		return e
	}
	ceiling, next := c.tenant.CostPerDay, c.cheapestAttempt()
	charged := c.g.tenants.Charged(c.tenant.ID)
	switch {
	case charged+next <= ceiling && n == 0:
		e := errorf(CodeTenantPending, "tenant %s's requests in flight hold what is left of its daily cost ceiling of $%g ($%g charged so far); retry once they finish",
			c.tenant.ID, ceiling.USD(), charged.USD())
		e.retryAfter = pendingRetryAfter(c.alias.Engine.Deadline)
		return e
	case charged+next <= ceiling:
		return errorf(CodeUpstreamUnavailable, "no provider answered, and the requests tenant %s has in flight hold what is left of its daily cost ceiling after %d attempts", c.tenant.ID, n)
	}
	e := errorf(CodeTenantBudget, "tenant %s has reached its daily cost ceiling of $%g ($%g charged; the next attempt's worst case does not fit); it resets at 00:00 UTC",
		c.tenant.ID, ceiling.USD(), charged.USD())
	now := c.g.clock.Now()
	e.retryAfter = int(math.Ceil(nextUTCDay(now).Sub(now).Seconds()))
	return e
}

// pendingRetryAfter is how long, in seconds, a request refused while
// reservations of requests in flight hold a budget's rest is told to
// wait: about the time they take — the alias's deadline, between a
// second and a minute.
func pendingRetryAfter(deadline time.Duration) int {
	return int(math.Ceil(min(max(deadline, time.Second), time.Minute).Seconds()))
}

// terminalError is the client error for a logical request that ended
// without an answer and before any output (docs/errors.md). Each names the
// bound that stopped it, with its numbers.
func (c *call) terminalError(d retry.Decision, last *attemptResult) *apiError {
	t, r := d.Terminal, d.Reason
	if last != nil && last.kind == gw.KindAccountRefused {
		what := "credential; the gateway's operator must fix the route's key"
		if last.obs.Cause == gw.CauseQuota {
			what = "account for its quota or billing; the gateway's operator must fund it"
		}
		return errorf(CodeUpstreamAuthFailed, "the provider of route %s refused the gateway's own %s (no other route could serve the request; nothing was wrong with it)", last.route.ID, what)
	}
	if last != nil && last.kind == gw.KindRouteUnavailable {
		return errorf(CodeRouteUnavailable, "the provider of route %s does not serve its model or deployment %q (no other route could serve the request; nothing was wrong with it); the gateway's operator must fix the route",
			last.route.ID, last.route.Model)
	}
	if last != nil && last.upstreamErr != nil && t == gw.TerminalRejected && last.kind != gw.KindProtocolViolation {
		return &apiError{upstream: last.upstreamErr, code: CodeInvalidRequest}
	}
	n, pol := len(c.rec.R.Attempts), c.alias.Engine
	if e := c.coordinationDown(d, n); e != nil {
		return e
	}
	switch {
	case t == gw.TerminalDeadline:
		return errorf(CodeDeadline, "the request's deadline (%s after it arrived) passed before an answer arrived, after %d attempts",
			c.deadline.Sub(c.created).Round(time.Millisecond), n)
	case r == gw.ReasonCircuitOpen:
		return errorf(CodeCircuitOpen, "the circuit breaker of every route that could serve model %q is open; no attempt was made after %d", c.alias.Name, n)
	case r == gw.ReasonRetryBudget:
		return errorf(CodeRetryBudget, "the fleet retry budget is exhausted (an outage is being contained); %d attempts were made and none is retried", n)
	case r == gw.ReasonCostBudget && d.TenantBound:
		return c.tenantBudgetError(n)
	case r == gw.ReasonCostBudget && n == 0:
		e := errorf(CodeInvalidRequest, "the worst case of one attempt (~%d prompt tokens plus %d output tokens) costs more than model %q allows per request (max_cost_usd $%g); lower max_tokens or shorten the prompt",
			c.rec.R.Request.EstimatedInputTokens, c.maxOutput(), c.alias.Name, pol.MaxCost.USD())
		e.param = "max_tokens"
		return e
	case r == gw.ReasonCostBudget:
		return errorf(CodeUpstreamUnavailable, "no provider answered, and the request's cost budget (max_cost_usd $%g) does not allow another attempt after %d", pol.MaxCost.USD(), n)
	case t == gw.TerminalIndeterminate && c.turn != nil:
		return c.turnUnknownError()
	case t == gw.TerminalIndeterminate:
		return errorf(CodeOutcomeUnknown, "the provider may have accepted the request; its outcome is unknown")
	case t == gw.TerminalRejected && last != nil && last.kind == gw.KindProtocolViolation:
		return errorf(CodeProtocolViolation, "the provider's response could not be read: %s", last.detail)
	case t == gw.TerminalRejected && n == 0:
		return errorf(CodeInvalidRequest, "no route of model %q can serve the request: %s", c.alias.Name, ineligible(c.rec.R.Request.IneligibleRoutes))
	case t == gw.TerminalRejected && last != nil && last.kind == gw.KindInvalidRequest && last.detail != "":
		// A route's own translation refused it: name what it refused.
		return errorf(CodeInvalidRequest, "no route of model %q can serve the request: %s: %s", c.alias.Name, last.route.ID, last.detail)
	case t == gw.TerminalRejected:
		return errorf(CodeInvalidRequest, "no route of model %q can serve the request", c.alias.Name)
	case allRateLimited(c.rec.R.Attempts):
		return errorf(CodeUpstreamUnavailable, "every provider of model %q answered 429 rate limited (%d attempts, %s)", c.alias.Name, n, r)
	case r == gw.ReasonAttemptBudget:
		return errorf(CodeUpstreamUnavailable, "no provider answered within %d attempts (max_attempts %d)", n, pol.MaxAttempts)
	case r == gw.ReasonRouteBudget:
		return errorf(CodeUpstreamUnavailable, "no provider answered within %d attempts (the route's max_attempts)", n)
	}
	return errorf(CodeUpstreamUnavailable, "no provider answered: every route of model %q was tried (%d attempts, %s)", c.alias.Name, n, r)
}

// ineligible names why each route cannot serve a request: "primary: no
// image input; fallback: context too small".
func ineligible(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "none is eligible"
	}
	parts := make([]string, 0, len(reasons))
	for route, why := range reasons {
		parts = append(parts, route+": "+why)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// allRateLimited reports whether every attempt was refused with a 429.
func allRateLimited(as []receipt.Attempt) bool {
	for _, a := range as {
		if a.Kind != string(gw.KindRateLimited) {
			return false
		}
	}
	return len(as) > 0
}

// coordinationDown is the error for a request the engine stopped because
// a shared bound refused it while the shared coordination was unreachable:
// the refusal says nothing about the breakers, budgets or tenant, and
// the client should hear what did happen.
func (c *call) coordinationDown(d retry.Decision, attempts int) *apiError {
	if c.g.coordHealth == nil {
		return nil
	}
	switch r := d.Reason; {
	case r == gw.ReasonCircuitOpen, r == gw.ReasonRetryBudget, r == gw.ReasonCostBudget && d.TenantBound:
	default:
		return nil
	}
	err := c.g.coordHealth.Err()
	if err == nil {
		return nil
	}
	e := errorf(CodeCoordinationUnavailable, "the gateway's shared coordination is unreachable, so no attempt could be admitted after %d; retry shortly", attempts)
	e.noRetry = attempts > 0
	return e
}

// cheapestAttempt is the smallest worst case an attempt of this request
// reserves on any route that may serve it.
func (c *call) cheapestAttempt() gw.NanoUSD {
	req, least := c.rec.Request(), gw.NanoUSD(-1)
	for i := range c.alias.Engine.Routes {
		r := &c.alias.Engine.Routes[i]
		if _, out := req.Ineligible[r.ID]; out {
			continue
		}
		if w := retry.Reservation(c.alias.Engine, r, req, 0); least < 0 || w < least {
			least = w
		}
	}
	return max(0, least)
}

// maxOutput is the output cap an attempt reserves for: the request's
// max_tokens, else the first route's maximum.
func (c *call) maxOutput() int64 {
	out := c.alias.Routes[0].Caps.MaxOutputTokens
	if m := c.in.IR.MaxTokens; m > 0 && (out == 0 || m < out) {
		out = m
	}
	return out
}

func nextUTCDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}
