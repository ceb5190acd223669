// Package mock is a fault-injecting fake of the OpenAI Chat Completions,
// Responses and embeddings and Anthropic Messages APIs, and of Azure OpenAI,
// AWS Bedrock Converse (its event-stream framing and a real SigV4 check),
// the Gemini API and Vertex AI (with an OAuth2 token endpoint for a
// service account's signed JWT) (docs/mock.md), faithful to their wire
// formats: chunk shapes and [DONE], the Anthropic and Responses event
// sequences, usage, error bodies, Retry-After and retry-after-ms. A shared
// core (script, counters, text, timing, faults) drives one codec per wire
// format; the codecs are written from the providers' API references and
// checked against the official SDKs in the package's tests. The package
// imports nothing of the gateway's — not internal/provider, nor its SSE,
// usage or token-estimate code — so that it is an independent witness of
// the gateway's wire code. Its answers are deterministic text
// drawn from a seed and the prompt, so a continuation request (assistant
// prefill, "prefix": true, or vLLM's continue_final_message) carries on
// exactly where its prefix ends. Faults are scripted per model, per
// idempotency key or per Nth call. It counts every request it receives and
// every token it generates, per idempotency key and per request id: the
// ground truth that receipts are checked against.
package mock

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"time"
)

// Fault types.
const (
	FaultStatus         = "status"         // an HTTP error with the provider's error body
	FaultContextLength  = "context_length" // 400 context_length_exceeded
	FaultContentPolicy  = "content_policy" // 400 content-policy refusal
	FaultQuota          = "insufficient_quota"
	FaultReset          = "reset"            // read the request, then reset the connection before headers
	FaultHang           = "hang"             // read the request, never answer
	FaultSilentClose    = "silent_close"     // read the request, stay silent DelayMS, then close the connection
	FaultSlowFirstToken = "slow_first_token" // wait Delay before the first token
	FaultDropAfter      = "drop_after"       // stream After tokens, then drop the connection
	FaultStallAfter     = "stall_after"      // stream After tokens, then go silent
	FaultMalformedAfter = "malformed_after"  // one invalid JSON chunk after After tokens
	FaultNoDone         = "no_done"          // finish and usage, but no [DONE] / message_stop
	FaultStreamError    = "stream_error_after"
	FaultRejectPrefill  = "reject_prefill" // 400 to any continuation request
	FaultGarbage        = "garbage"        // 200 with a body that is not the protocol
	// FaultAuth is the provider's own refusal of a credential (401/403 in
	// its shape; ErrorType picks among its kinds, such as Bedrock's
	// ExpiredTokenException).
	FaultAuth = "auth"
	// FaultModelNotFound is the provider's answer for a model or
	// deployment it does not have, in its own shape: OpenAI's 404
	// model_not_found, Anthropic's 404 not_found_error, Azure's 404
	// DeploymentNotFound, Bedrock's 400 ValidationException ("The provided
	// model identifier is invalid."), Google's 404 NOT_FOUND. The model
	// lookups (GET …/models/{model}) answer the same for a model a rule
	// with this fault names.
	FaultModelNotFound = "model_not_found"
	// FaultBadCRCAfter: a Bedrock stream sends After tokens, then the
	// next token's frame with its message CRC wrong (ErrorType
	// "prelude": its prelude CRC), then the rest. Other protocols have
	// no CRC: it has no effect on them.
	FaultBadCRCAfter = "bad_crc_after"
)

// Fault is what a matching rule does to a request.
type Fault struct {
	Type         string `json:"type"`
	Status       int    `json:"status,omitempty"`
	ErrorType    string `json:"error_type,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
	Message      string `json:"message,omitempty"`
	RetryAfter   string `json:"retry_after,omitempty"`    // Retry-After header value
	RetryAfterMS string `json:"retry_after_ms,omitempty"` // retry-after-ms header value
	After        int    `json:"after,omitempty"`          // tokens streamed before the fault
	DelayMS      int    `json:"delay_ms,omitempty"`

	// RetryDelay is the retryDelay of the RetryInfo a Google 429 carries,
	// sent as it is ("20s", or something malformed); default RetryAfter
	// seconds, else "1s".
	RetryDelay string `json:"retry_delay,omitempty"`
}

// Rule matches requests and applies its fault. The first matching rule
// wins; a request no rule matches is answered normally.
type Rule struct {
	// Model matches the request's model ("" matches any): a route.
	Model string `json:"model,omitempty"`
	// Key matches the Idempotency-Key header ("" matches any).
	Key string `json:"key,omitempty"`
	// Calls lists which calls (1-based, counted per model) match; empty
	// matches every call.
	Calls []int `json:"calls,omitempty"`
	// FirstCalls matches the first N calls per model (0: no limit).
	FirstCalls int `json:"first_calls,omitempty"`
	// ForMS matches only during the first ForMS milliseconds after the
	// script was set: a route that is down, then healthy (flapping).
	ForMS int `json:"for_ms,omitempty"`
	// Continuation: true matches only continuation requests, false only
	// fresh ones; absent matches both.
	Continuation *bool `json:"continuation,omitempty"`
	// Percent, when set, matches that share of calls, picked by a hash
	// of the rule's place in the script and the call number: random-
	// looking, and the same on every run.
	Percent int `json:"percent,omitempty"`
	// CountTokens: true matches only POST /v1/messages/count_tokens
	// (its calls numbered apart from the generations', per model), where
	// status, reset and hang faults apply; rules without it never match
	// a count.
	CountTokens bool  `json:"count_tokens,omitempty"`
	Fault       Fault `json:"fault"`
}

// Script is the mock's fault script.
type Script struct {
	Rules []Rule `json:"rules"`
}

// LoadScript reads a script from a JSON file.
func LoadScript(path string) (Script, error) {
	var s Script
	data, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("read script: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("parse script %s: %w", path, err)
	}
	return s, nil
}

// call is what a rule is matched against.
type call struct {
	model        string
	key          string
	n            int // per-model call number, 1-based
	continuation bool
	since        time.Duration // since the script was set
	countTokens  bool          // a POST /v1/messages/count_tokens
}

func (r *Rule) matches(c call, index int) bool {
	switch {
	case r.Percent > 0 && pick(index, c.n) >= r.Percent:
		return false
	case r.CountTokens != c.countTokens:
		return false
	case r.Model != "" && r.Model != c.model:
		return false
	case r.Key != "" && r.Key != c.key:
		return false
	case r.FirstCalls > 0 && c.n > r.FirstCalls:
		return false
	case r.ForMS > 0 && c.since >= time.Duration(r.ForMS)*time.Millisecond:
		return false
	case r.Continuation != nil && *r.Continuation != c.continuation:
		return false
	case r.Fault.Type == FaultRejectPrefill && !c.continuation:
		return false
	}
	if len(r.Calls) == 0 {
		return true
	}
	for _, n := range r.Calls {
		if n == c.n {
			return true
		}
	}
	return false
}

// pick is a call's number from 0 to 99 for the rule at index.
func pick(index, n int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", index, n)
	return int(h.Sum32() % 100)
}
