package bedrock

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// This file holds all of oncegate's knowledge of Bedrock's errors: how to
// read one (its code from the x-amzn-ErrorType header, else the body's
// __type or code; its message from the body's message), and which
// docs/retries.md kind each is.

// maxField bounds each string read from an error.
const maxField = 512

// ParseError reads a Bedrock error response, as the AWS SDKs do: the code
// is the x-amzn-ErrorType header, else the body's "__type" or "code",
// sanitized ("ns#Name:uri" is Name); the message is the body's "message"
// (any case). Every field is bounded and stripped of control characters.
// It never fails and never panics.
func ParseError(status int, header http.Header, body []byte) *provider.UpstreamError {
	e := &provider.UpstreamError{Status: status}
	var info struct {
		Code    json.RawMessage `json:"code"`
		Type    json.RawMessage `json:"__type"`
		Message json.RawMessage `json:"message"`
	}
	parsed := json.Unmarshal(body, &info) == nil
	code := ""
	if header != nil {
		code = header.Get("X-Amzn-ErrorType")
	}
	if code == "" && parsed {
		code = firstString(info.Code, info.Type)
	}
	e.Type = sanitizeCode(code)
	if parsed {
		e.Message = clean(firstString(info.Message))
	} else {
		e.Message = clean(string(body))
	}
	return e
}

// ParseException reads an exception message of a ConverseStream (its
// :exception-type header and JSON payload).
func ParseException(exceptionType string, payload []byte) *provider.UpstreamError {
	var info struct {
		Message json.RawMessage `json:"message"`
	}
	e := &provider.UpstreamError{Type: sanitizeCode(exceptionType)}
	if json.Unmarshal(payload, &info) == nil {
		e.Message = clean(firstString(info.Message))
	} else {
		e.Message = clean(string(payload))
	}
	// The stream's exception types are the operation's error names in
	// lower camel case (throttlingException): name them as the errors.
	if r, size := utf8.DecodeRuneInString(e.Type); size > 0 && unicode.IsLower(r) {
		e.Type = string(unicode.ToUpper(r)) + e.Type[size:]
	}
	e.Status = StatusOf(e.Type)
	return e
}

func firstString(raws ...json.RawMessage) string {
	for _, raw := range raws {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// sanitizeCode keeps the name of an error code: the part before ':' and
// after '#' ("aws.protocols#ThrottlingException:http://…" is
// ThrottlingException), bounded and cleaned.
func sanitizeCode(code string) string {
	code, _, _ = strings.Cut(code, ":")
	if _, after, ok := strings.Cut(code, "#"); ok {
		code = after
	}
	return clean(code)
}

// clean bounds s and replaces control characters and invalid UTF-8, so
// provider text cannot forge log lines or headers.
func clean(s string) string {
	if len(s) > maxField {
		s = s[:maxField]
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

// The error codes Bedrock's runtime and AWS's front end answer, with the
// HTTP status each comes with (the Bedrock API reference's error tables).
var statusOf = map[string]int{
	"ThrottlingException":                 429,
	"ServiceUnavailableException":         503,
	"ModelNotReadyException":              429,
	"ModelTimeoutException":               408,
	"InternalServerException":             500,
	"ModelErrorException":                 424,
	"ModelStreamErrorException":           424,
	"ValidationException":                 400,
	"ResourceNotFoundException":           404,
	"ServiceQuotaExceededException":       400,
	"ConflictException":                   400,
	"AccessDeniedException":               403,
	"UnrecognizedClientException":         403,
	"InvalidSignatureException":           403,
	"ExpiredTokenException":               403,
	"IncompleteSignatureException":        403,
	"MissingAuthenticationTokenException": 403,
	"InvalidClientTokenId":                403,
	"SignatureDoesNotMatch":               403,
}

// StatusOf is the HTTP status an error code comes with (0: unknown), for
// an in-stream exception, which has none of its own.
func StatusOf(code string) int {
	for k, v := range statusOf {
		if strings.EqualFold(k, code) {
			return v
		}
	}
	return 0
}

// Classify maps a Bedrock error to its outcome kind (docs/retries.md) and
// the refinement the engine needs; the error code decides, the status
// only when the code is unknown.
//
//   - ThrottlingException: rate_limited (Retry-After honoured).
//   - ServiceUnavailableException, ModelNotReadyException (a 429 that asks
//     to come back when the model is loaded), ModelTimeoutException,
//     InternalServerException, ModelErrorException and
//     ModelStreamErrorException: unavailable.
//   - AccessDeniedException, UnrecognizedClientException,
//     InvalidSignatureException, ExpiredTokenException and AWS's other
//     signature and token refusals: account_refused with cause
//     upstream_auth_failed — the gateway's own credential, never the
//     request, is refused; the next route serves, and the client sees 502
//     upstream_auth_failed, never the provider's text.
//   - ServiceQuotaExceededException: account_refused, cause
//     insufficient_quota.
//   - ValidationException: route_unavailable when it says the route's
//     model id is wrong ("The provided model identifier is invalid.", a
//     model that needs an inference profile, one past its end of life);
//     rejected otherwise, with cause context_length_exceeded when the
//     input does not fit the model, or policy_denied when a content
//     filter refused it.
//   - ResourceNotFoundException, and a 404 of an unknown code: the
//     route's model (or path) does not exist — route_unavailable. A
//     Converse request names no other resource.
//   - ConflictException and other 4xx: rejected.
func Classify(e *provider.UpstreamError) (gw.Kind, gw.Cause) {
	switch strings.ToLower(e.Type) {
	case "throttlingexception":
		return gw.KindRateLimited, ""
	case "serviceunavailableexception", "modelnotreadyexception", "modeltimeoutexception",
		"internalserverexception", "modelerrorexception", "modelstreamerrorexception":
		return gw.KindUnavailable, ""
	case "accessdeniedexception", "unrecognizedclientexception", "invalidsignatureexception",
		"expiredtokenexception", "incompletesignatureexception", "missingauthenticationtokenexception",
		"invalidclienttokenid", "signaturedoesnotmatch":
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	case "servicequotaexceededexception":
		return gw.KindAccountRefused, gw.CauseQuota
	case "validationexception":
		return validation(e)
	case "resourcenotfoundexception":
		return gw.KindRouteUnavailable, ""
	case "conflictexception":
		return gw.KindRejected, ""
	}
	s := e.Status
	switch {
	case s == 0 || s < 400:
		// An in-stream error of an unknown type: the provider failed.
		if s == 0 {
			return gw.KindUnavailable, ""
		}
		return gw.KindProtocolViolation, ""
	case s == 429:
		return gw.KindRateLimited, ""
	case s == 408 || s >= 500:
		return gw.KindUnavailable, ""
	case s == 401 || s == 403:
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	case s == 400:
		return validation(e)
	case s == 404:
		return gw.KindRouteUnavailable, ""
	}
	return gw.KindRejected, ""
}

// validation refines a 400 by its message.
func validation(e *provider.UpstreamError) (gw.Kind, gw.Cause) {
	m := strings.ToLower(e.Message)
	switch {
	case strings.Contains(m, "model identifier is invalid"), strings.Contains(m, "could not resolve the foundation model"),
		strings.Contains(m, "on-demand throughput isn"), strings.Contains(m, "reached the end of its life"):
		// The route's model id, not the request: Bedrock answers these
		// for any request on it.
		return gw.KindRouteUnavailable, ""
	case strings.Contains(m, "too long") && (strings.Contains(m, "input") || strings.Contains(m, "prompt")),
		strings.Contains(m, "too many input tokens"), strings.Contains(m, "too many total text bytes"),
		strings.Contains(m, "context window"), strings.Contains(m, "context length"), strings.Contains(m, "exceed context limit"):
		return gw.KindRejected, gw.CauseContextLength
	case strings.Contains(m, "content filter"), strings.Contains(m, "blocked by") && strings.Contains(m, "guardrail"):
		return gw.KindPolicyDenied, ""
	}
	return gw.KindRejected, ""
}

// ClassifyStream maps an exception inside a ConverseStream that came
// before any visible output (after output, the stream is interrupted,
// whatever the exception): the same mapping as Classify, its status being
// the one the exception type comes with.
func ClassifyStream(e *provider.UpstreamError) (gw.Kind, gw.Cause) { return Classify(e) }

// IsExpiredCredential reports whether e refused the credential as
// expired: the caller should Invalidate the Auth's cache, so the next
// attempt signs with fresh credentials.
func IsExpiredCredential(e *provider.UpstreamError) bool {
	return strings.EqualFold(e.Type, "ExpiredTokenException") || strings.EqualFold(e.Type, "ExpiredToken")
}
