package gemini

import (
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Protocol is the Gemini wire protocol, which no client speaks: a
// request is always translated to it.
const Protocol provider.Protocol = "gemini"

// API is the "gemini" provider type.
var API provider.Type = apiType{}

type apiType struct{}

func (apiType) Spec() provider.Spec {
	return provider.Spec{Protocol: Protocol, Required: []string{"api_key_env|api_key_file"},
		Allowed: []string{"base_url", "api_key_env", "api_key_file"}}
}

// NativeOnly implements provider.FieldTable with the gemini column.
func (apiType) NativeOnly(p provider.Protocol, body []byte) []string { return NativeOnly(p, body) }

// Droppable implements provider.FieldTable.
func (apiType) Droppable(p provider.Protocol, name string) bool { return Droppable(p, name) }

func (apiType) Open(cfg provider.Config) (provider.Endpoint, error) {
	base := strings.TrimRight(cfg.Provider.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	return &Endpoint{base: base, auth: provider.StaticKey(cfg, APIKeyHeader, "")}, nil
}

// Endpoint is one configured Gemini API provider.
type Endpoint struct {
	base string
	auth provider.Auth
}

// BaseURL is the configured base URL or Google's.
func (e *Endpoint) BaseURL() string { return e.base }

// Auth is the x-goog-api-key key.
func (e *Endpoint) Auth() provider.Auth { return e.auth }

// Path is a model's method path under the base URL.
func Path(model string, stream bool) string {
	return "/v1beta/models/" + url.PathEscape(model) + Method(stream)
}

// Request builds a generateContent call.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	body, err := BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	return &provider.Outbound{Path: Path(t.Model, t.Stream), Header: http.Header{}, Body: body, PromptTokens: provider.PromptTokens(in.IR)}, nil
}

// Decode reads a GenerateContentResponse.
func (e *Endpoint) Decode(_ provider.Op, body []byte) (*provider.Response, error) {
	return DecodeResponse(body)
}

// Stream reads streamGenerateContent?alt=sse chunks.
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder {
	return provider.SSEStream(body, NewDecoder())
}

// Fault reads and classifies Google's error shape.
func (e *Endpoint) Fault(status int, _ http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := ParseError(status, body)
	k, c := Classify(ue)
	return ue, k, c
}

// StreamFault classifies an error chunk.
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return ClassifyStreamError(ue)
}
