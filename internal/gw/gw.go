// Package gw holds oncegate's shared vocabulary: outcome classes and kinds,
// terminals and stop reasons, data boundaries and usage. It imports only the
// standard library so every other package can speak it.
//
// The string values of these types are part of the external contract
// (docs/retries.md, docs/receipts.md): they appear in receipts, metrics and error bodies.
package gw

import (
	"errors"
	"fmt"
	"time"
)

// ErrCredentialRefused is wrapped by an error that says the provider
// refused the gateway's own credential before a request could be sent
// (a token endpoint refusing a service account): the route's account is
// refused (KindAccountRefused, CauseUpstreamAuth).
var ErrCredentialRefused = errors.New("the provider refused the gateway's credential")

// Class is the retry family of an observed attempt outcome (docs/retries.md).
type Class string

// The outcome classes. Success is the class of an attempt that completed.
const (
	ClassSuccess       Class = "success"
	ClassRetryable     Class = "retryable"
	ClassNonRetryable  Class = "non_retryable"
	ClassIndeterminate Class = "indeterminate"
)

// Kind is the precise outcome of one attempt. Every kind belongs to exactly
// one Class; see Kind.Class.
type Kind string

// The outcome kinds of docs/retries.md
const (
	KindOK Kind = "ok"

	KindTimeoutBeforeResponse Kind = "timeout_before_response"
	KindRateLimited           Kind = "rate_limited"
	KindUnavailable           Kind = "unavailable"
	// KindAccountRefused: the provider refused the gateway's own account
	// on this route — its credential (401, 403) or its quota or billing
	// (insufficient_quota). Nothing was generated and nothing is wrong
	// with the request: the route fails, and the next route on another
	// account serves it at once (docs/retries.md).
	KindAccountRefused Kind = "account_refused"
	// KindRouteUnavailable: the route itself is broken, not the request —
	// its model or deployment does not exist at the provider (a 404 for
	// the model, Azure's DeploymentNotFound, Bedrock's "model identifier
	// is invalid") or its path is not served. Like a refused account:
	// the route is not tried again, and the next route serves the
	// request at once (docs/retries.md).
	KindRouteUnavailable Kind = "route_unavailable"

	KindRejected          Kind = "rejected"
	KindPolicyDenied      Kind = "policy_denied"
	KindInvalidRequest    Kind = "invalid_request"
	KindProtocolViolation Kind = "protocol_violation"

	KindUnknownProviderAcceptance    Kind = "unknown_provider_acceptance"
	KindStreamInterruptedAfterOutput Kind = "stream_interrupted_after_output"

	// KindCancelled is the outcome of an attempt abandoned because the
	// caller went away (client disconnect) or lost a hedge race. It is
	// final for the logical request and never retried.
	KindCancelled Kind = "cancelled"
)

// Class reports the retry family of k. Unknown kinds are non-retryable, so
// a corrupted or future kind can never cause a retry.
func (k Kind) Class() Class {
	switch k {
	case KindOK:
		return ClassSuccess
	case KindTimeoutBeforeResponse, KindRateLimited, KindUnavailable, KindAccountRefused, KindRouteUnavailable:
		return ClassRetryable
	case KindUnknownProviderAcceptance, KindStreamInterruptedAfterOutput:
		return ClassIndeterminate
	default:
		return ClassNonRetryable
	}
}

// Kinds lists every kind, in the order of docs/retries.md.
func Kinds() []Kind {
	return []Kind{KindOK, KindTimeoutBeforeResponse, KindRateLimited, KindUnavailable, KindAccountRefused,
		KindRouteUnavailable, KindRejected, KindPolicyDenied, KindInvalidRequest, KindProtocolViolation,
		KindUnknownProviderAcceptance, KindStreamInterruptedAfterOutput, KindCancelled}
}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds() {
		if k == v {
			return true
		}
	}
	return false
}

// Cause refines a Kind with the detail the retry engine needs to choose
// between retrying the same route and moving on (docs/retries.md refinements).
// The empty cause means no refinement.
type Cause string

// Causes the engine acts on.
const (
	// CauseFirstByteTimeout: the provider accepted the request and went
	// silent. Retryable, but moves to the next route at once.
	CauseFirstByteTimeout Cause = "first_byte_timeout"
	// CauseContextLength: the prompt does not fit this route. Rejected, but
	// may fall back to a route with a strictly larger context window.
	CauseContextLength Cause = "context_length_exceeded"
	// CauseClientGone: the caller disconnected; the request is cancelled.
	CauseClientGone Cause = "client_disconnected"
	// CauseHedgeLost: the attempt lost a hedge race and was cancelled.
	CauseHedgeLost Cause = "hedge_lost"
	// CauseStall: a stream went silent past the idle timeout after its
	// output began. A stalled route is not asked to continue it.
	CauseStall Cause = "stall"
	// CauseUpstreamAuth: the provider refused the gateway's own credential
	// (401, 403): the route's account is refused (KindAccountRefused).
	CauseUpstreamAuth Cause = "upstream_auth_failed"
	// CauseQuota: the provider refused the gateway's account for its quota
	// or billing (OpenAI's 429 insufficient_quota, Anthropic's credit
	// balance): the route's account is refused (KindAccountRefused).
	CauseQuota Cause = "insufficient_quota"
)

// Terminal is the final state of a logical request (docs/architecture.md).
type Terminal string

// The terminals.
const (
	TerminalSucceeded     Terminal = "succeeded"
	TerminalRejected      Terminal = "rejected"
	TerminalExhausted     Terminal = "exhausted"
	TerminalDeadline      Terminal = "deadline"
	TerminalIndeterminate Terminal = "indeterminate"
	TerminalCancelled     Terminal = "cancelled"
)

// Reason says why the engine stopped (docs/retries.md). Completed is the reason
// recorded with a successful terminal.
type Reason string

// The stop reasons.
const (
	ReasonCompleted       Reason = "completed"
	ReasonNonRetryable    Reason = "non_retryable"
	ReasonIndeterminate   Reason = "indeterminate"
	ReasonAttemptBudget   Reason = "attempt_budget"
	ReasonRouteBudget     Reason = "route_budget"
	ReasonCostBudget      Reason = "cost_budget"
	ReasonDeadline        Reason = "deadline"
	ReasonRoutesExhausted Reason = "routes_exhausted"
	ReasonCircuitOpen     Reason = "circuit_open"
	ReasonRetryBudget     Reason = "retry_budget"
	ReasonCancelled       Reason = "cancelled"
)

// DataBoundary orders where request data may travel: local < private < external.
type DataBoundary int

// The data boundaries, in increasing order of exposure.
const (
	BoundaryLocal DataBoundary = iota + 1
	BoundaryPrivate
	BoundaryExternal
)

// ParseDataBoundary reads "local", "private" or "external".
func ParseDataBoundary(s string) (DataBoundary, error) {
	switch s {
	case "local":
		return BoundaryLocal, nil
	case "private":
		return BoundaryPrivate, nil
	case "external":
		return BoundaryExternal, nil
	}
	return 0, fmt.Errorf("unknown data boundary %q (want local, private or external)", s)
}

// String returns the configuration spelling of b.
func (b DataBoundary) String() string {
	switch b {
	case BoundaryLocal:
		return "local"
	case BoundaryPrivate:
		return "private"
	case BoundaryExternal:
		return "external"
	}
	return fmt.Sprintf("boundary(%d)", int(b))
}

// Usage is what one attempt consumed, in provider tokens. InputTokens
// counts every prompt token, those read from or written to the
// provider's prompt cache included; CachedTokens and CacheWriteTokens say
// how many of them were cache reads and cache writes.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedTokens are input tokens read from the provider's prompt
	// cache (OpenAI prompt_tokens_details.cached_tokens, Anthropic
	// cache_read_input_tokens).
	CachedTokens int64 `json:"cached_tokens"`
	// CacheWriteTokens are input tokens written to the provider's prompt
	// cache (Anthropic cache_creation_input_tokens; OpenAI reports none).
	// Omitted at 0, so that receipts written before it keep their digests.
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CachedTokens: u.CachedTokens + v.CachedTokens, CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens}
}

// Billable is the number of tokens charged: input plus output.
func (u Usage) Billable() int64 { return u.InputTokens + u.OutputTokens }

// NanoUSD is an amount of money in billionths of a US dollar. Integer money
// keeps budget comparisons exact; it holds up to about 9.2 billion dollars.
type NanoUSD int64

// USD converts n to dollars for display and receipts.
func (n NanoUSD) USD() float64 { return float64(n) / 1e9 }

// NanoFromUSD converts dollars to NanoUSD, rounding to the nearest nano.
func NanoFromUSD(usd float64) NanoUSD {
	if usd >= 0 {
		return NanoUSD(usd*1e9 + 0.5)
	}
	return NanoUSD(usd*1e9 - 0.5)
}

// Price is a route's per-token price in NanoUSD per token (1 USD per
// million tokens is 1,000 nano-USD per token). A Price is a value: safe to
// share.
type Price struct {
	InputPerToken  NanoUSD
	OutputPerToken NanoUSD
	// CachedInputPerToken prices an input token read from the provider's
	// prompt cache; nil: InputPerToken.
	CachedInputPerToken *NanoUSD
	// CacheWritePerToken prices an input token written to the provider's
	// prompt cache; nil: InputPerToken.
	CacheWritePerToken *NanoUSD
}

// PriceFromPerMTok builds a Price from USD per million tokens, as the
// configuration states prices. The cached prices are the input price
// until WithCachePrices sets them.
func PriceFromPerMTok(inUSD, outUSD float64) Price {
	return Price{InputPerToken: NanoFromUSD(inUSD / 1e6), OutputPerToken: NanoFromUSD(outUSD / 1e6)}
}

// WithCachePrices returns p with the prices of cache reads and cache
// writes, in USD per million tokens; a nil one stays the input price.
func (p Price) WithCachePrices(cachedUSD, writeUSD *float64) Price {
	perToken := func(usd *float64) *NanoUSD {
		if usd == nil {
			return nil
		}
		n := NanoFromUSD(*usd / 1e6)
		return &n
	}
	p.CachedInputPerToken, p.CacheWritePerToken = perToken(cachedUSD), perToken(writeUSD)
	return p
}

// CachedInput is the price of an input token read from the cache.
func (p Price) CachedInput() NanoUSD {
	if p.CachedInputPerToken != nil {
		return *p.CachedInputPerToken
	}
	return p.InputPerToken
}

// CacheWrite is the price of an input token written to the cache.
func (p Price) CacheWrite() NanoUSD {
	if p.CacheWritePerToken != nil {
		return *p.CacheWritePerToken
	}
	return p.InputPerToken
}

// Cost prices a usage: uncached input at the input price, cache reads
// and writes at their own prices (the input price where none is set),
// output at the output price. Cache counts larger than the input (a
// provider's inconsistent report) are capped at it.
func (p Price) Cost(u Usage) NanoUSD {
	input := max(u.InputTokens, 0)
	reads := min(max(u.CachedTokens, 0), input)
	writes := min(max(u.CacheWriteTokens, 0), input-reads)
	return NanoUSD(input-reads-writes)*p.InputPerToken + NanoUSD(reads)*p.CachedInput() +
		NanoUSD(writes)*p.CacheWrite() + NanoUSD(u.OutputTokens)*p.OutputPerToken
}

// WorstCase is the reservation for an attempt before dispatch: the prompt
// estimate at the dearest of the input prices (a cache write may cost
// more than plain input) plus the output cap at the output price.
func (p Price) WorstCase(inputTokens, maxOutputTokens int64) NanoUSD {
	prompt := max(p.InputPerToken, p.CachedInput(), p.CacheWrite())
	return NanoUSD(inputTokens)*prompt + NanoUSD(maxOutputTokens)*p.OutputPerToken
}

// Day is t's UTC day: days since the Unix epoch, rounded down. (A number,
// not a formatted date: spend is kept per day and compared on every
// request.)
func Day(t time.Time) int64 {
	s := t.Unix()
	if s < 0 {
		return (s+1)/86400 - 1
	}
	return s / 86400
}
