package vertex

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/gemini"
)

// AI is the "vertex" provider type. A configured provider's type is its
// publisher's (provider.PerConfig): Gemini models speak Gemini's protocol
// and have its field table; Anthropic models speak Messages, so an
// Anthropic client's body is patched, not rebuilt, and they can continue
// an answer by prefill.
var AI provider.Type = googleType{}

var keys = []string{"project", "location", "publisher", "credentials_file_env", "base_url"}

var required = []string{"project", "location", "credentials_file_env"}

type googleType struct{}

func (googleType) Spec() provider.Spec {
	return provider.Spec{Protocol: gemini.Protocol, Required: required, Allowed: keys}
}

// For is the type of one configured provider: its publisher's.
func (googleType) For(p *config.Provider) provider.Type {
	if p.Publisher == PublisherAnthropic {
		return anthropicType{}
	}
	return googleType{}
}

// NativeOnly implements provider.FieldTable with the gemini column.
func (googleType) NativeOnly(p provider.Protocol, body []byte) []string {
	return gemini.NativeOnly(p, body)
}

// Droppable implements provider.FieldTable.
func (googleType) Droppable(p provider.Protocol, name string) bool { return gemini.Droppable(p, name) }

func (googleType) Open(cfg provider.Config) (provider.Endpoint, error) { return open(cfg) }

type anthropicType struct{}

func (anthropicType) Spec() provider.Spec {
	return provider.Spec{Protocol: provider.Anthropic, Required: required, Allowed: keys,
		Continuations: []string{provider.ContinuePrefill}}
}

func (anthropicType) Open(cfg provider.Config) (provider.Endpoint, error) { return open(cfg) }

// open prepares one configured provider. It does no network I/O: the
// first token is fetched by the first request (or by Ready). Without a
// key (the policy's validation opens providers without their secrets)
// every request's authentication fails as refused.
func open(cfg provider.Config) (provider.Endpoint, error) {
	p := cfg.Provider
	r := Route{BaseURL: strings.TrimRight(p.BaseURL, "/"), Project: p.Project, Location: p.Location, Publisher: p.Publisher}
	if r.Publisher == "" {
		r.Publisher = PublisherGoogle
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.BaseURL == "" {
		r.BaseURL = DefaultBaseURL(r.Location)
	}
	e := &Endpoint{route: r, auth: &tokenAuth{source: cfg.KeySource}}
	if cfg.APIKey != "" {
		tokens, err := NewTokens([]byte(cfg.APIKey), nil)
		if err != nil {
			return nil, fmt.Errorf("credentials_file_env %s: %w", cfg.KeySource, err)
		}
		e.auth.tokens = tokens
	}
	return e, nil
}

// Endpoint is one configured Vertex AI provider.
type Endpoint struct {
	route Route
	auth  *tokenAuth
}

// BaseURL is the configured or regional endpoint.
func (e *Endpoint) BaseURL() string { return e.route.BaseURL }

// Auth is the service account's bearer token.
func (e *Endpoint) Auth() provider.Auth { return e.auth }

// Request builds a generateContent or rawPredict call. An Anthropic
// client's anthropic-beta header goes to an Anthropic model.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	b, err := e.route.BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if e.route.Publisher == PublisherAnthropic && in.Protocol == provider.Anthropic && t.Beta != "" {
		h.Set("anthropic-beta", t.Beta)
	}
	return &provider.Outbound{Path: e.route.Path(t.Model, t.Stream), Header: h, Body: b.Body, PromptTokens: b.PromptTokens}, nil
}

// Decode reads an answer of the publisher's protocol.
func (e *Endpoint) Decode(_ provider.Op, body []byte) (*provider.Response, error) {
	return e.route.DecodeResponse(body)
}

// Scan reads an Anthropic model's message for its usage without decoding
// it (provider.Scanner); a Gemini answer is always decoded.
func (e *Endpoint) Scan(op provider.Op, body []byte) (gw.Usage, bool) {
	if op != provider.OpChat || e.route.Publisher != PublisherAnthropic {
		return gw.Usage{}, false
	}
	return provider.ScanResponse(provider.Anthropic, body)
}

var _ provider.Scanner = (*Endpoint)(nil)

// Stream reads the publisher's SSE stream.
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder {
	return provider.SSEStream(body, e.route.NewDecoder())
}

// Fault reads and classifies Google's or Anthropic's error shape.
func (e *Endpoint) Fault(status int, _ http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := ParseError(status, body)
	k, c := Classify(ue)
	return ue, k, c
}

// StreamFault classifies an error event.
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return ClassifyStreamError(ue)
}

// tokenAuth sets the service account's bearer token.
type tokenAuth struct {
	tokens *Tokens // nil: no key was read (validation only)
	source string
}

// Authenticate sets the bearer token, waiting for one at most until
// ctx's deadline. A refused token wraps gw.ErrCredentialRefused.
func (a *tokenAuth) Authenticate(ctx context.Context, req *http.Request, _ []byte) error {
	tok, err := a.token(ctx)
	if err != nil {
		return err
	}
	Authenticate(req.Header, tok)
	return nil
}

func (a *tokenAuth) token(ctx context.Context) (string, error) {
	if a.tokens == nil {
		return "", fmt.Errorf("%w: no service account key was read", ErrTokenRefused)
	}
	return a.tokens.Token(ctx)
}

// Ready fetches a token now (`oncegate check --connect`).
func (a *tokenAuth) Ready(ctx context.Context) error {
	_, err := a.token(ctx)
	return err
}

// Describe names the service account and where its key came from; never
// the key or a token.
func (a *tokenAuth) Describe() string {
	who := "a service account"
	if a.tokens != nil && a.tokens.Email != "" {
		who = "service account " + a.tokens.Email
	}
	return "OAuth2 bearer token of " + who + " (key file from " + a.source + ")"
}

// Path is a model's method path under the base URL.
func (r Route) Path(model string, stream bool) string {
	r.BaseURL = "/" // r is a copy: the path alone
	return r.URL(model, stream)
}
