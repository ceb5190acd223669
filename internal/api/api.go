// Package api is what every handler says to a client that it must refuse:
// the closed vocabulary of error codes (docs/errors.md), each code's status
// and x-should-retry, and an error rendered in the client's own protocol
// with the oncegate block and headers. It knows no handler.
package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
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
	// A virtual key's own limits (docs/keys-and-teams.md).
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

	// The admin API's conditional writes of a key (docs/keys-and-teams.md).
	CodeKeyRevoked         = "key_revoked"
	CodeKeyConflict        = "key_conflict"
	CodePreconditionFailed = "precondition_failed"

	// The admin API's teams (docs/keys-and-teams.md, "Teams").
	CodeTenantInFile   = "tenant_in_file"
	CodeTenantExists   = "tenant_exists"
	CodeTenantDeleted  = "tenant_deleted"
	CodeTenantConflict = "tenant_conflict"
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
	CodeTenantInFile:            {409, false, "invalid_request_error", "invalid_request_error"},
	CodeTenantExists:            {409, false, "invalid_request_error", "invalid_request_error"},
	CodeTenantDeleted:           {409, false, "invalid_request_error", "invalid_request_error"},
	CodeTenantConflict:          {409, false, "invalid_request_error", "invalid_request_error"},
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

// Error is an error on its way to a client.
type Error struct {
	Code       string
	Message    string
	Param      string
	RetryAfter int // seconds; 0: no Retry-After header
	// NoRetry sends x-should-retry: false whatever the code says: an
	// attempt was already sent, so a client's retry could pay twice.
	NoRetry bool
	// Pending sends x-should-retry: true for a code that alone says
	// false: a budget refused only while requests in flight hold its
	// rest (key_budget_exceeded, docs/keys-and-teams.md).
	Pending bool
	// Upstream, when set, is a provider's non-retryable error passed
	// through with its own status, type and code (after sanitising).
	Upstream *provider.UpstreamError
}

func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Meta is the oncegate block and headers every error carries.
type Meta struct {
	RequestID string
	Attempts  int
	Terminal  gw.Terminal
	Reason    gw.Reason
	// Dedup, when set, is the answer's X-Oncegate-Dedup: "joined" for an
	// arrival told how the request it joined ended.
	Dedup string
}

// Render returns e in the client's protocol: status and headers, and the
// body with the oncegate block.
func (e *Error) Render(p provider.Protocol, m Meta) (*coord.Head, []byte) {
	ce := &provider.ClientError{Code: e.Code, Message: e.Message, Param: e.Param,
		RequestID: m.RequestID, Attempts: m.Attempts, Terminal: string(m.Terminal), Reason: string(m.Reason)}
	cs, ok := codeStatus[e.Code]
	if !ok {
		cs = codeStatus[CodeInternal]
	}
	ce.Status, ce.Type = cs.status, cs.typ
	if p == provider.Anthropic {
		ce.Type = cs.anType
	}
	retry := (cs.retry || e.Pending) && !e.NoRetry
	if u := e.Upstream; u != nil {
		ce.Status, ce.Type, ce.Code, ce.Message, ce.Param, retry = u.Status, u.Type, u.Code, u.Message, u.Param, false
		if ce.Type == "" {
			ce.Type = cs.typ
		}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", strconv.FormatBool(retry))
	SetIDHeaders(h, m.RequestID, m.Attempts)
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	return &coord.Head{Status: ce.Status, Header: h, Code: e.Code, Dedup: m.Dedup}, provider.EncodeError(p, ce)
}

// Write sends e straight to a client (errors before any logical request).
func (e *Error) Write(w http.ResponseWriter, p provider.Protocol, m Meta) {
	NoteCode(w, e.Code)
	head, body := e.Render(p, m)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	WriteHead(w, head, "")
	_, _ = w.Write(body)
}

// SetDropped names, in X-Oncegate-Dropped, the request's fields the
// answering route did not carry (docs/translation.md).
func SetDropped(h http.Header, fields []string) {
	if len(fields) > 0 {
		h.Set("X-Oncegate-Dropped", strings.Join(fields, ", "))
	}
}

func SetIDHeaders(h http.Header, requestID string, attempts int) {
	if requestID != "" {
		h.Set("X-Oncegate-Request-Id", requestID)
		h.Set("X-Oncegate-Attempts", strconv.Itoa(attempts))
	}
}

// PendingRetryAfter is how long, in seconds, a request refused while
// reservations of requests in flight hold a budget's rest is told to
// wait: about the time they take — the alias's deadline, between a
// second and a minute.
func PendingRetryAfter(deadline time.Duration) int {
	return int(math.Ceil(min(max(deadline, time.Second), time.Minute).Seconds()))
}

func NextUTCDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// WriteHead writes a response head; dedup names X-Oncegate-Dedup unless the
// head overrides it.
func WriteHead(w http.ResponseWriter, h *coord.Head, dedup string) {
	if h.Code != "" {
		NoteCode(w, h.Code)
	}
	dst := w.Header()
	for k, v := range h.Header {
		dst[k] = v
	}
	if h.Dedup != "" {
		dedup = h.Dedup
	}
	if dedup != "" {
		dst.Set("X-Oncegate-Dedup", dedup)
	}
	w.WriteHeader(h.Status)
}

// CodeNoter is a response writer that records the error code its answer
// carries (the access log's, docs/operations.md "Logs").
type CodeNoter interface {
	NoteCode(code string)
}

// NoteCode records on w, or on a writer it wraps, the gateway error code
// an answer carries.
func NoteCode(w http.ResponseWriter, code string) {
	for {
		switch v := w.(type) {
		case CodeNoter:
			v.NoteCode(code)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap() // a writer wrapped on the way
		default:
			return
		}
	}
}

// ErrorType is the error type a code carries in protocol p's vocabulary
// (OpenAI's "rate_limit_error", Anthropic's "overloaded_error").
func ErrorType(code string, p provider.Protocol) string {
	cs, ok := codeStatus[code]
	if !ok {
		cs = codeStatus[CodeInternal]
	}
	if p == provider.Anthropic {
		return cs.anType
	}
	return cs.typ
}
