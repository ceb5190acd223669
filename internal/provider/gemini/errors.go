package gemini

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Google's error body (google.rpc.Status as JSON, aip.dev/193):
//
//	{"error":{"code":400,"message":"…","status":"INVALID_ARGUMENT",
//	  "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID",…}]}}
//
// ParseError keeps status in UpstreamError.Type, the ErrorInfo reason in
// Code, a per-day quota violation in Param and the RetryInfo delay in
// RetryDelay.

type googleStatus struct {
	Code    json.RawMessage   `json:"code"`
	Message json.RawMessage   `json:"message"`
	Status  json.RawMessage   `json:"status"`
	Details []json.RawMessage `json:"details"`
}

type googleDetail struct {
	Type       string          `json:"@type"`
	Reason     string          `json:"reason"`
	RetryDelay json.RawMessage `json:"retryDelay"`
	Violations []struct {
		QuotaID string `json:"quotaId"`
	} `json:"violations"`
}

// ParseError reads a Google error body — an object, or the one-element
// array a streaming method answers with — and falls back to
// provider.ParseError for any other shape (an Anthropic model's own error
// on Vertex). status is the HTTP status, 0 inside a stream (the body's
// code is used then). It never fails and never panics: the body is
// untrusted.
func ParseError(status int, body []byte) *provider.UpstreamError {
	b := bytes.TrimSpace(body)
	if len(b) > 0 && b[0] == '[' {
		var arr []json.RawMessage
		if json.Unmarshal(b, &arr) == nil && len(arr) > 0 {
			b = bytes.TrimSpace(arr[0])
		}
	}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	var st googleStatus
	if json.Unmarshal(b, &env) != nil || len(env.Error) == 0 || json.Unmarshal(env.Error, &st) != nil || len(st.Status) == 0 && len(st.Code) == 0 {
		return provider.ParseError(status, body)
	}
	e := &provider.UpstreamError{Status: status, Type: word(st.Status), Message: text(st.Message)}
	if e.Status == 0 {
		if n, err := strconv.Atoi(string(st.Code)); err == nil && n >= 100 && n <= 599 {
			e.Status = n
		}
	}
	for _, raw := range st.Details {
		var d googleDetail
		if json.Unmarshal(raw, &d) != nil {
			continue
		}
		switch {
		case strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") && d.Reason != "" && e.Code == "":
			e.Code = word(json.RawMessage(strconv.Quote(d.Reason)))
		case strings.HasSuffix(d.Type, "google.rpc.RetryInfo") && e.RetryDelay == "":
			e.RetryDelay = word(d.RetryDelay) // "20s"; a non-string or odd text is no hint
		case strings.HasSuffix(d.Type, "google.rpc.QuotaFailure"):
			for _, v := range d.Violations {
				if strings.Contains(v.QuotaID, "PerDay") {
					e.Param = "quota_per_day"
				}
			}
		}
	}
	return e
}

// word reads a JSON string holding an enum word (a status or reason):
// upper-case letters, digits and underscores, bounded.
func word(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	if len(s) > 64 {
		s = s[:64]
	}
	for _, c := range []byte(s) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return ""
		}
	}
	return s
}

// text reads a JSON string as printable, bounded text.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return provider.ParseError(0, []byte(s)).Message // bounded, control characters replaced
}

// Reasons (google.rpc.ErrorInfo) that refuse the gateway's credential
// rather than the request.
var credentialReasons = map[string]bool{
	"API_KEY_INVALID": true, "API_KEY_EXPIRED": true, "API_KEY_SERVICE_BLOCKED": true,
	"API_KEY_HTTP_REFERRER_BLOCKED": true, "API_KEY_IP_ADDRESS_BLOCKED": true, "API_KEY_ANDROID_APP_BLOCKED": true,
	"API_KEY_IOS_APP_BLOCKED": true, "ACCESS_TOKEN_EXPIRED": true, "ACCESS_TOKEN_SCOPE_INSUFFICIENT": true,
	"ACCESS_TOKEN_TYPE_UNSUPPORTED": true, "CREDENTIALS_MISSING": true, "SERVICE_DISABLED": true,
	"IAM_PERMISSION_DENIED": true, "CONSUMER_INVALID": true, "USER_PROJECT_DENIED": true,
}

// Reasons that refuse the gateway's account for billing.
var billingReasons = map[string]bool{"BILLING_DISABLED": true, "BILLING_NOT_ACTIVE": true}

// Classify maps a Google error (ParseError) to its outcome kind
// (docs/retries.md); docs/providers.md has the table. Errors in another
// shape go to provider.Classify.
func Classify(e *provider.UpstreamError) (gw.Kind, gw.Cause) {
	if e.Type == "FAILED_GENERATION" {
		return gw.KindUnavailable, ""
	}
	msg := strings.ToLower(e.Message)
	switch {
	case e.Status != 0 && e.Status < 400:
		return gw.KindProtocolViolation, ""
	case credentialReasons[e.Code]:
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	case billingReasons[e.Code]:
		return gw.KindAccountRefused, gw.CauseQuota
	}
	switch e.Type {
	case "RESOURCE_EXHAUSTED":
		if e.Param == "quota_per_day" {
			// A daily quota does not come back within any retry budget:
			// the route's account is refused until tomorrow.
			return gw.KindAccountRefused, gw.CauseQuota
		}
		return gw.KindRateLimited, ""
	case "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN":
		return gw.KindUnavailable, ""
	case "UNAUTHENTICATED", "PERMISSION_DENIED":
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	case "FAILED_PRECONDITION":
		if strings.Contains(msg, "billing") || strings.Contains(msg, "location is not supported") || strings.Contains(msg, "free tier is not available") {
			// The account cannot use this API from here or without
			// billing; the request itself is fine.
			return gw.KindAccountRefused, gw.CauseQuota
		}
		return gw.KindRejected, ""
	case "INVALID_ARGUMENT", "OUT_OF_RANGE":
		switch {
		case strings.Contains(msg, "api key not valid") || strings.Contains(msg, "api key expired"):
			return gw.KindAccountRefused, gw.CauseUpstreamAuth
		case strings.Contains(msg, "input token count") && strings.Contains(msg, "exceeds the maximum"),
			strings.Contains(msg, "exceeds the maximum number of tokens"):
			return gw.KindRejected, gw.CauseContextLength
		case strings.Contains(msg, "unexpected model name format"):
			return gw.KindRouteUnavailable, "" // the route's model, whatever the request
		}
		return gw.KindRejected, ""
	case "NOT_FOUND":
		switch {
		case e.Status >= 500:
			return gw.KindUnavailable, ""
		case namesRequestObject(msg):
			return gw.KindRejected, ""
		}
		// The route's model ("models/x is not found for API version
		// v1beta"; Vertex's "Publisher Model … was not found"), project
		// or location: the route is broken, not the request.
		return gw.KindRouteUnavailable, ""
	case "ALREADY_EXISTS", "CANCELLED":
		if e.Status >= 500 {
			return gw.KindUnavailable, ""
		}
		return gw.KindRejected, ""
	}
	return provider.Classify(e)
}

// namesRequestObject reports a NOT_FOUND message about an object a
// request can name — a cached content or an uploaded file — rather than
// the route's model.
func namesRequestObject(msg string) bool {
	return strings.Contains(msg, "cachedcontents/") || strings.Contains(msg, "cached content") ||
		strings.Contains(msg, "files/") || strings.Contains(msg, "file ")
}

// ClassifyStreamError maps an error that arrived inside a stream, before
// any visible output.
func ClassifyStreamError(e *provider.UpstreamError) (gw.Kind, gw.Cause) {
	if e.Type == "FAILED_GENERATION" || e.Type != "" && e.Status != 0 {
		return Classify(e)
	}
	return provider.ClassifyStreamError(e)
}
