package gateway

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Client-facing error codes (DESIGN §4.4): a closed vocabulary, separate
// from outcome kinds, that sets the status and x-should-retry.
const (
	CodeInvalidRequest      = "invalid_request"
	CodeInvalidKey          = "invalid_idempotency_key"
	CodeUnauthorized        = "unauthorized"
	CodeModelNotFound       = "model_not_found"
	CodeKeyInUse            = "idempotency_key_in_use"
	CodeKeyExpired          = "idempotency_key_expired"
	CodeKeyReused           = "idempotency_key_reused"
	CodeTenantRateLimited   = "tenant_rate_limited"
	CodeTenantBudget        = "tenant_budget_exceeded"
	CodeOutcomeUnknown      = "outcome_unknown"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodeCircuitOpen         = "circuit_open"
	CodeRetryBudget         = "retry_budget_exhausted"
	CodeDeadline            = "deadline_exceeded"
	CodeProtocolViolation   = "upstream_protocol_violation"
	CodeRequestTooLarge     = "request_too_large"
	CodeInternal            = "internal_error"
)

// codeStatus is each gateway code's HTTP status and whether a client may
// retry it (x-should-retry).
var codeStatus = map[string]struct {
	status int
	retry  bool
	typ    string // error type in OpenAI's vocabulary
	anType string // error type in Anthropic's vocabulary
}{
	CodeInvalidRequest:      {400, false, "invalid_request_error", "invalid_request_error"},
	CodeInvalidKey:          {400, false, "invalid_request_error", "invalid_request_error"},
	CodeRequestTooLarge:     {413, false, "invalid_request_error", "request_too_large"},
	CodeUnauthorized:        {401, false, "authentication_error", "authentication_error"},
	CodeModelNotFound:       {404, false, "invalid_request_error", "not_found_error"},
	CodeKeyInUse:            {409, true, "invalid_request_error", "invalid_request_error"},
	CodeKeyExpired:          {409, false, "invalid_request_error", "invalid_request_error"},
	CodeKeyReused:           {422, false, "invalid_request_error", "invalid_request_error"},
	CodeTenantRateLimited:   {429, true, "rate_limit_error", "rate_limit_error"},
	CodeTenantBudget:        {429, false, "rate_limit_error", "rate_limit_error"},
	CodeOutcomeUnknown:      {502, false, "api_error", "api_error"},
	CodeProtocolViolation:   {502, false, "api_error", "api_error"},
	CodeUpstreamUnavailable: {503, false, "api_error", "overloaded_error"},
	CodeCircuitOpen:         {503, false, "api_error", "overloaded_error"},
	CodeRetryBudget:         {503, false, "api_error", "overloaded_error"},
	CodeDeadline:            {504, false, "api_error", "api_error"},
	CodeInternal:            {500, false, "api_error", "api_error"},
}

// apiError is an error on its way to a client.
type apiError struct {
	code       string
	message    string
	param      string
	retryAfter int // seconds; 0: no Retry-After header
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
	retry := cs.retry
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
	return &coord.Head{Status: ce.Status, Header: h}, provider.EncodeError(p, ce)
}

// write sends e straight to a client (errors before any logical request).
func (e *apiError) write(w http.ResponseWriter, p provider.Protocol, m meta) {
	head, body := e.render(p, m)
	writeHead(w, head, "")
	_, _ = w.Write(body)
}

func setIDHeaders(h http.Header, requestID string, attempts int) {
	if requestID != "" {
		h.Set("X-Oncegate-Request-Id", requestID)
		h.Set("X-Oncegate-Attempts", strconv.Itoa(attempts))
	}
}

// terminalError is the client error for a logical request that ended
// without an answer and before any output (DESIGN §4.4).
func terminalError(t gw.Terminal, r gw.Reason, last *attemptResult) *apiError {
	if last != nil && last.upstreamErr != nil && (t == gw.TerminalRejected) {
		return &apiError{upstream: last.upstreamErr, code: CodeInvalidRequest}
	}
	switch {
	case t == gw.TerminalDeadline:
		return errorf(CodeDeadline, "the request's deadline passed before an answer arrived")
	case r == gw.ReasonCircuitOpen:
		return errorf(CodeCircuitOpen, "every route's circuit breaker is open")
	case r == gw.ReasonRetryBudget:
		return errorf(CodeRetryBudget, "the fleet retry budget is exhausted")
	case t == gw.TerminalIndeterminate:
		return errorf(CodeOutcomeUnknown, "the provider may have accepted the request; its outcome is unknown")
	case t == gw.TerminalRejected && last != nil && last.kind == gw.KindProtocolViolation:
		return errorf(CodeProtocolViolation, "the provider's response could not be read: %s", last.detail)
	case t == gw.TerminalRejected:
		return errorf(CodeInvalidRequest, "no route of this model can serve the request")
	case r == gw.ReasonCostBudget:
		return errorf(CodeUpstreamUnavailable, "the request's cost budget does not allow another attempt")
	}
	return errorf(CodeUpstreamUnavailable, "no provider answered within the retry policy (%s)", r)
}
