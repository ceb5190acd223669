package provider

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
)

// This file holds all of oncegate's knowledge of provider errors: how to
// read an error body, and which docs/retries.md kind each error is.

// UpstreamError is a provider's error as parsed from its (untrusted) body:
// every field is bounded and stripped of control characters.
type UpstreamError struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
	// RetryDelay is a delay hint the error body carried, as written:
	// Google's RetryInfo.retryDelay ("20s"); "" when none. It counts as
	// Retry-After does, read by retry.ParseRetryDelay.
	RetryDelay string
}

func (e *UpstreamError) Error() string {
	return "provider error " + strconv.Itoa(e.Status) + " " + e.Type + "/" + e.Code + ": " + e.Message
}

// maxErrorField bounds each string read from an error body.
const maxErrorField = 512

// ParseError reads an error body in either provider's shape — OpenAI's
// {"error":{"message","type","code","param"}} or Anthropic's
// {"type":"error","error":{"type","message"}} — or, failing both, keeps a
// bounded excerpt of the text. It never fails and never panics.
func ParseError(status int, body []byte) *UpstreamError {
	e := &UpstreamError{Status: status}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 {
		var inner struct {
			Message json.RawMessage `json:"message"`
			Type    json.RawMessage `json:"type"`
			Code    json.RawMessage `json:"code"`
			Param   json.RawMessage `json:"param"`
		}
		if json.Unmarshal(env.Error, &inner) == nil {
			e.Message, e.Type, e.Code, e.Param = scalar(inner.Message), scalar(inner.Type), scalar(inner.Code), scalar(inner.Param)
			return e
		}
		e.Message = scalar(env.Error) // {"error": "text"}
		return e
	}
	e.Message = clean(string(body))
	return e
}

// scalar renders a JSON string, number or boolean as bounded text; other
// values (null, objects) are empty.
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return clean(s)
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return clean(n.String())
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		if b {
			return "true"
		}
		return "false"
	}
	return ""
}

// clean bounds s and replaces control characters and invalid UTF-8, so
// provider text cannot forge log lines or headers.
func clean(s string) string {
	if len(s) > maxErrorField {
		s = s[:maxErrorField]
		for !utf8.ValidString(s) && len(s) > 0 {
			s = s[:len(s)-1]
		}
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
}

// Classify maps a provider's error response to its outcome kind (
// docs/retries.md) and the refinement the engine needs.
func Classify(e *UpstreamError) (gw.Kind, gw.Cause) {
	s := e.Status
	switch {
	case s < 400:
		// An informational or redirect status is no answer of the
		// protocol's: a violation, never passed through.
		return gw.KindProtocolViolation, ""
	case isQuota(e):
		// An exhausted balance is not transient, and it is the route's
		// account's, not the request's.
		return gw.KindAccountRefused, gw.CauseQuota
	case s == 429:
		return gw.KindRateLimited, ""
	case e.Type == "overloaded_error" || s == 529:
		return gw.KindUnavailable, "" // Anthropic overload
	case s == 408 || s >= 500:
		return gw.KindUnavailable, ""
	case isContextLength(e):
		return gw.KindRejected, gw.CauseContextLength
	case isContentPolicy(e):
		return gw.KindPolicyDenied, ""
	case s == 401 || s == 403:
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	case RouteMissing(e):
		return gw.KindRouteUnavailable, ""
	}
	return gw.KindRejected, ""
}

// RouteMissing reports an error that says the route itself does not
// exist at the provider, whatever the request: OpenAI's model_not_found
// (any 4xx), Anthropic's 404 not_found_error naming the model ("model:
// …"), a 404 whose message says the model does not exist (vLLM,
// Ollama), and a 404 on the route's own path — one whose body is no API
// error at all (an HTML or text page, {"detail":"Not Found"}),
// Anthropic's bare "Not Found", or OpenAI's "Invalid URL". A 404 that
// names another parameter (OpenAI's previous_response_id) is about an
// object the request names: not the route's.
func RouteMissing(e *UpstreamError) bool {
	if e.Code == "model_not_found" || e.Type == "model_not_found" {
		return e.Status >= 400 && e.Status < 500
	}
	if e.Status != 404 || e.Param != "" && e.Param != "model" {
		return false
	}
	m := strings.ToLower(e.Message)
	switch {
	case e.Type == "" && e.Code == "":
		return true // not an API's error: the path is not served
	case e.Type == "not_found_error":
		return strings.HasPrefix(m, "model:") || m == "not found"
	case strings.HasPrefix(m, "invalid url"):
		return true
	}
	return strings.Contains(m, "model") && (strings.Contains(m, "does not exist") || strings.Contains(m, "not found"))
}

// isQuota reports an error that refuses the gateway's account for its
// quota or billing: OpenAI's insufficient_quota (429) and
// billing_hard_limit_reached, Anthropic's "credit balance is too low"
// (400 invalid_request_error).
func isQuota(e *UpstreamError) bool {
	switch {
	case e.Code == "insufficient_quota" || e.Type == "insufficient_quota", e.Code == "billing_hard_limit_reached":
		return true
	case e.Status == 400 || e.Status == 402 || e.Status == 403 || e.Status == 429:
		m := strings.ToLower(e.Message)
		return strings.Contains(m, "credit balance is too low") || strings.Contains(m, "billing hard limit") ||
			strings.Contains(m, "exceeded your current quota")
	}
	return false
}

// ClassifyStreamError maps an error event inside a stream (Anthropic's
// "event: error", OpenAI's {"error":…} chunk) that arrived before any
// visible output. It has no HTTP status of its own.
func ClassifyStreamError(e *UpstreamError) (gw.Kind, gw.Cause) {
	switch e.Type {
	case "overloaded_error", "api_error", "server_error":
		return gw.KindUnavailable, ""
	case "rate_limit_error", "rate_limit_exceeded":
		return gw.KindRateLimited, ""
	}
	if isContentPolicy(e) {
		return gw.KindPolicyDenied, ""
	}
	if e.Status != 0 {
		return Classify(e)
	}
	return gw.KindUnavailable, ""
}

func isContextLength(e *UpstreamError) bool {
	if e.Code == "context_length_exceeded" || e.Type == "context_length_exceeded" || e.Code == "string_above_max_length" {
		return true
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "maximum context length") || // OpenAI
		strings.Contains(m, "prompt is too long") || // Anthropic
		strings.Contains(m, "exceed context limit") || // Anthropic: input length and max_tokens
		strings.Contains(m, "context window")
}

func isContentPolicy(e *UpstreamError) bool {
	switch e.Code {
	case "content_policy_violation", "content_filter", "safety_violation":
		return true
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "content management policy") || // Azure OpenAI
		strings.Contains(m, "safety system") || // OpenAI images / moderation
		strings.Contains(m, "content filtering policy") || // Anthropic output blocked
		strings.Contains(m, "violat") && strings.Contains(m, "usage polic")
}
