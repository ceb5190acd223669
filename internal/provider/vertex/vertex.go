// Package vertex speaks Vertex AI's publisher models: Google's Gemini
// models (publisher google: generateContent and
// streamGenerateContent?alt=sse, the codec of package gemini) and
// Anthropic's Claude models (publisher anthropic: rawPredict and
// streamRawPredict, whose bodies are Messages requests with the version
// in anthropic_version and no model). Requests carry an OAuth2 bearer
// token of a service account (Tokens). docs/providers.md describes the
// type.
package vertex

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/gemini"
)

// Publishers.
const (
	PublisherGoogle    = "google"
	PublisherAnthropic = "anthropic"
)

// AnthropicVersion is the anthropic_version a rawPredict body carries.
const AnthropicVersion = "vertex-2023-10-16"

// DefaultBaseURL is Vertex AI's regional endpoint for location; the
// location "global" has no regional prefix.
func DefaultBaseURL(location string) string {
	if location == "global" {
		return "https://aiplatform.googleapis.com"
	}
	return "https://" + location + "-aiplatform.googleapis.com"
}

// Route is where a Vertex provider sends a model's requests.
type Route struct {
	BaseURL, Project, Location, Publisher string
}

// Validate reports a missing or unknown key by its config name.
func (r Route) Validate() error {
	switch {
	case r.Project == "":
		return fmt.Errorf("vertex: project is required")
	case r.Location == "":
		return fmt.Errorf("vertex: location is required")
	case r.Publisher != PublisherGoogle && r.Publisher != PublisherAnthropic:
		return fmt.Errorf("vertex: publisher must be google or anthropic, found %q", r.Publisher)
	}
	for _, s := range []string{r.Project, r.Location} {
		if strings.ContainsAny(s, "/?#%") {
			return fmt.Errorf("vertex: project and location must be plain names, found %q", s)
		}
	}
	return nil
}

// URL is the method URL of model: :generateContent or
// :streamGenerateContent?alt=sse for Gemini models, :rawPredict or
// :streamRawPredict for Anthropic models.
func (r Route) URL(model string, stream bool) string {
	base := r.BaseURL
	if base == "" {
		base = DefaultBaseURL(r.Location)
	}
	u := strings.TrimRight(base, "/") + "/v1/projects/" + url.PathEscape(r.Project) + "/locations/" + url.PathEscape(r.Location) +
		"/publishers/" + r.Publisher + "/models/" + url.PathEscape(model)
	if r.Publisher == PublisherAnthropic {
		if stream {
			return u + ":streamRawPredict"
		}
		return u + ":rawPredict"
	}
	return u + gemini.Method(stream)
}

// Protocol is the wire protocol of the publisher's models:
// provider.Anthropic for anthropic, "" (Gemini's own) for google.
func (r Route) Protocol() provider.Protocol {
	if r.Publisher == PublisherAnthropic {
		return provider.Anthropic
	}
	return ""
}

// Authenticate sets the bearer token; the client's own credentials never
// reach Google.
func Authenticate(h http.Header, token string) {
	h.Del("x-api-key")
	h.Del("anthropic-version")
	h.Del(gemini.APIKeyHeader)
	h.Set("Authorization", "Bearer "+token)
}

// BuildRequest writes the body of one attempt: a generateContent body for
// a Gemini model, a Messages body rewritten for rawPredict for an
// Anthropic model (built by the product's own Anthropic encoder, then
// without model and with anthropic_version). in is never modified.
func (r Route) BuildRequest(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Built, error) {
	if r.Publisher != PublisherAnthropic {
		body, err := gemini.BuildRequest(in, t, prefix)
		if err != nil {
			return nil, err
		}
		ir := in.IR
		return &provider.Built{Body: body, PromptTokens: provider.PromptTokens(ir)}, nil
	}
	t.Protocol = provider.Anthropic
	built, err := provider.BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	body, err := RawPredictBody(built.Body)
	if err != nil {
		return nil, err
	}
	built.Body = body
	return built, nil
}

// RawPredictBody rewrites a Messages request body for rawPredict: the
// model is in the URL, not the body, and the API version is in the body
// as anthropic_version. Every other byte stays as it is
// (provider.ReplaceMembers), unless the body is not one it can split.
func RawPredictBody(messages []byte) ([]byte, error) {
	if b, ok := provider.ReplaceMembers(messages, provider.MemberEdit{Key: "model"},
		provider.MemberEdit{Key: "anthropic_version", Value: []byte(`"` + AnthropicVersion + `"`)}); ok {
		return b, nil
	}
	return rebuildRawPredictBody(messages)
}

// rebuildRawPredictBody is RawPredictBody by decoding the body into a map
// of its members and encoding them again.
func rebuildRawPredictBody(messages []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(messages, &top); err != nil {
		return nil, fmt.Errorf("vertex: rewrite messages body: %w", err)
	}
	delete(top, "model")
	top["anthropic_version"] = json.RawMessage(`"` + AnthropicVersion + `"`)
	b, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("vertex: rewrite messages body: %w", err)
	}
	return b, nil
}

// DecodeResponse reads a successful answer of the route's publisher.
func (r Route) DecodeResponse(body []byte) (*provider.Response, error) {
	if r.Publisher == PublisherAnthropic {
		return provider.DecodeResponse(provider.Anthropic, body)
	}
	return gemini.DecodeResponse(body)
}

// NewDecoder returns the stream decoder of the route's publisher.
func (r Route) NewDecoder() provider.Decoder {
	if r.Publisher == PublisherAnthropic {
		return provider.NewDecoder(provider.Anthropic)
	}
	return gemini.NewDecoder()
}

// Continuations lists the continuation styles the publisher's models
// can use: assistant prefill for Anthropic models (set per route and
// release, as newer Claude models refuse it), none for Gemini.
func (r Route) Continuations() []string {
	if r.Publisher == PublisherAnthropic {
		return []string{provider.ContinuePrefill}
	}
	return gemini.Continuations()
}

// ParseError reads an error body: Vertex AI's own errors are Google's
// shape (auth, quota, a model not found); an Anthropic model's errors
// are Anthropic's, which gemini.ParseError hands to provider.ParseError.
func ParseError(status int, body []byte) *provider.UpstreamError {
	return gemini.ParseError(status, body)
}

// Classify maps an error of either shape (docs/providers.md).
func Classify(e *provider.UpstreamError) (gw.Kind, gw.Cause) { return gemini.Classify(e) }

// ClassifyStreamError maps an error inside a stream before visible output.
func ClassifyStreamError(e *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return gemini.ClassifyStreamError(e)
}
