// Package gemini speaks the Gemini API (generativelanguage.googleapis.com):
// generateContent and streamGenerateContent?alt=sse, authenticated with
// the x-goog-api-key header. Its codec — request, answer, stream and
// errors — is also the one Vertex AI's Gemini models speak (package
// vertex). docs/providers.md describes the type; Fields is its column
// of the translation table.
package gemini

import (
	"net/http"
	"net/url"
	"strings"
)

// DefaultBaseURL is the Gemini API's endpoint.
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// APIKeyHeader carries the Gemini API key.
const APIKeyHeader = "x-goog-api-key"

// URL is the generateContent (or, streaming, streamGenerateContent with
// SSE framing) URL of model under baseURL.
func URL(baseURL, model string, stream bool) string {
	u := strings.TrimRight(baseURL, "/") + "/v1beta/models/" + url.PathEscape(model)
	return u + Method(stream)
}

// Method is the method suffix of a Gemini model's URL.
func Method(stream bool) string {
	if stream {
		return ":streamGenerateContent?alt=sse"
	}
	return ":generateContent"
}

// Authenticate sets the request's API key header; the client's own
// credentials never reach Google.
func Authenticate(h http.Header, apiKey string) {
	h.Del("Authorization")
	h.Del("x-api-key")
	h.Set(APIKeyHeader, apiKey)
}

// Continuations lists the continuation styles (docs/streaming.md) a
// Gemini model supports: none. Google documents no way to continue a
// partial answer (no assistant prefill, no prefix flag), so a broken
// Gemini stream is never resumed on a Gemini route.
func Continuations() []string { return nil }
