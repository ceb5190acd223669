// Package azure is the "azure-openai" provider type (docs/providers.md):
// OpenAI's Chat Completions and embeddings as Azure OpenAI serves them —
// on a deployment, {base_url}/openai/deployments/{deployment}/…?api-version=…,
// or on the v1 API, {base_url}/openai/v1/…, when api_version is empty —
// with the key in the api-key header, or with a Microsoft Entra ID token
// (auth: entra, entra.go). The route's model is the deployment name.
// Bodies are OpenAI's; faults are read in Azure's shapes.
package azure

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/openai"
)

// OpenAI is the "azure-openai" type. A configured provider's type is its
// auth's (provider.PerConfig): "key" takes api_key_env or api_key_file;
// "entra" takes neither, and may name tenant_id and client_id.
var OpenAI provider.Type = azureType{}

// The auth settings.
const (
	AuthKey   = "key"   // the api-key header (default)
	AuthEntra = "entra" // a Microsoft Entra ID bearer token
)

// azureType is the type of a provider whose auth is auth ("": the
// default, key; anything else unknown, which Open refuses).
type azureType struct{ auth string }

var keyKeys = []string{"base_url", "api_version", "api_key_env", "api_key_file", "auth"}

var entraKeys = []string{"base_url", "api_version", "auth", "tenant_id", "client_id"}

func (t azureType) Spec() provider.Spec {
	s := provider.Spec{Protocol: provider.OpenAI, Embeddings: true}
	switch t.auth {
	case "", AuthKey:
		s.Required, s.Allowed = []string{"base_url", "api_key_env|api_key_file"}, keyKeys
	case AuthEntra:
		s.Required, s.Allowed, s.Variant = []string{"base_url"}, entraKeys, "auth: entra"
	default:
		// Open names the unknown auth; every key of either kind is
		// allowed meanwhile, so that it is the one error.
		s.Required, s.Allowed = []string{"base_url"}, append(slices.Clone(keyKeys), "tenant_id", "client_id")
	}
	return s
}

// For is the type of one configured provider: its auth's.
func (azureType) For(p *config.Provider) provider.Type { return azureType{auth: p.Auth} }

func (azureType) Open(cfg provider.Config) (provider.Endpoint, error) {
	p := cfg.Provider
	if v := p.APIVersion; strings.ContainsAny(v, "&?#/ ") {
		return nil, &provider.ConfigError{Key: "api_version", Err: fmt.Errorf("%q: want a version such as 2024-10-21", v)}
	}
	base := strings.TrimRight(p.BaseURL, "/")
	// A resource endpoint written with the SDKs' /openai suffix is the
	// same endpoint.
	base = strings.TrimSuffix(base, "/openai")
	var auth provider.Auth
	switch p.Auth {
	case "", AuthKey:
		auth = provider.StaticKey(cfg, "api-key", "")
	case AuthEntra:
		a, err := openEntra(cfg)
		if err != nil {
			return nil, err
		}
		auth = a
	default:
		return nil, &provider.ConfigError{Key: "auth", Err: fmt.Errorf("unknown value %q (want %s or %s)", p.Auth, AuthKey, AuthEntra)}
	}
	return &Endpoint{Endpoint: openai.NewEndpoint(base, auth), version: p.APIVersion}, nil
}

// An Azure answer is OpenAI's: it is read, and scanned, as one.
var _ provider.Scanner = (*Endpoint)(nil)

// Endpoint is one Azure OpenAI resource.
type Endpoint struct {
	*openai.Endpoint
	version string // "": the v1 API
}

// Request builds a Chat Completions or embeddings request on the route's
// deployment (its model), or on the v1 API with the deployment as model.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	chat, embed := "/openai/v1/chat/completions", "/openai/v1/embeddings"
	if e.version != "" {
		d := "/openai/deployments/" + url.PathEscape(t.Model)
		q := "?api-version=" + url.QueryEscape(e.version)
		chat, embed = d+"/chat/completions"+q, d+"/embeddings"+q
	}
	return openai.Build(in, t, prefix, chat, embed)
}

// Fault reads Azure's error shapes (OpenAI's envelope, with Azure's codes)
// and classifies them (docs/providers.md):
//   - a content filter (400, code content_filter, innererror
//     ResponsibleAIPolicyViolation) is policy_denied: never retried,
//     never shopped to another route;
//   - a refused key (401 "invalid subscription key", 403 access denied)
//     is account_refused: upstream_auth_failed, the route's own fault;
//   - 429 is rate_limited (its retry-after-ms honoured by the engine),
//     unless it says the quota is spent;
//   - DeploymentNotFound (404) — the route's deployment does not exist —
//     and any other 404 on the route's path (Azure's bare "Resource not
//     found" for a wrong path or a missing api-version) are
//     route_unavailable: the route is broken, not the request; the next
//     route serves, and the provider's text never reaches the client.
func (e *Endpoint) Fault(status int, h http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := provider.ParseError(status, body)
	switch {
	case isAuth(status, ue):
		return ue, gw.KindAccountRefused, gw.CauseUpstreamAuth
	case isContentFilter(ue, body):
		return ue, gw.KindPolicyDenied, ""
	case isRouteMissing(status, ue):
		return ue, gw.KindRouteUnavailable, ""
	}
	k, c := provider.Classify(ue)
	return ue, k, c
}

// StreamFault classifies an error chunk: Azure's in-stream content filter
// is policy_denied.
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	if isContentFilter(ue, nil) {
		return gw.KindPolicyDenied, ""
	}
	return provider.ClassifyStreamError(ue)
}

// Stream reads chat.completion.chunk events (Azure adds
// prompt_filter_results chunks, which carry no output).
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder { return e.Endpoint.Stream(body) }

// isAuth reports Azure's refusal of the key: 401 (its "Access denied due
// to invalid subscription key or wrong API endpoint"), or a 403 whose
// message says access was denied for the key.
func isAuth(status int, ue *provider.UpstreamError) bool {
	m := strings.ToLower(ue.Message)
	switch {
	case status == http.StatusUnauthorized:
		return true
	case strings.Contains(m, "invalid subscription key"), strings.Contains(m, "access denied due to"):
		return status == http.StatusForbidden || status == http.StatusBadRequest
	}
	return false
}

// isContentFilter reports Azure's content filter: code content_filter, or
// an innererror with ResponsibleAIPolicyViolation or a
// content_filter_result.
func isContentFilter(ue *provider.UpstreamError, body []byte) bool {
	if ue.Code == "content_filter" || ue.Code == "ResponsibleAIPolicyViolation" {
		return true
	}
	s := string(body)
	return strings.Contains(s, `"ResponsibleAIPolicyViolation"`) || strings.Contains(s, `"content_filter_result"`)
}

// isRouteMissing reports Azure's answer for a route that does not exist:
// code DeploymentNotFound, or a 404 that names no parameter of the
// request (Azure's chat and embeddings calls name no stored object).
func isRouteMissing(status int, ue *provider.UpstreamError) bool {
	switch {
	case ue.Code == "DeploymentNotFound":
		return true
	case status == http.StatusNotFound:
		return ue.Param == "" || ue.Param == "model"
	}
	return provider.RouteMissing(ue)
}
