// Package anthropic is the "anthropic" provider type (docs/providers.md):
// Anthropic's Messages API at {base_url}/v1/messages with an x-api-key key
// and the anthropic-version header. The wire format itself is package
// provider's, which clients speak too.
package anthropic

import (
	"io"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Messages is the "anthropic" type.
var Messages provider.Type = messagesType{}

type messagesType struct{}

func (messagesType) Spec() provider.Spec {
	return provider.Spec{Protocol: provider.Anthropic, Required: []string{"base_url"},
		Allowed: []string{"base_url", "api_key_env", "api_key_file"}, CountTokens: true,
		Continuations: []string{provider.ContinuePrefill}}
}

func (messagesType) Open(cfg provider.Config) (provider.Endpoint, error) {
	return &Endpoint{base: strings.TrimRight(cfg.Provider.BaseURL, "/"), auth: provider.StaticKey(cfg, "x-api-key", "")}, nil
}

// Endpoint is one Anthropic provider.
type Endpoint struct {
	base string
	auth provider.Auth
}

// BaseURL is the configured base URL.
func (e *Endpoint) BaseURL() string { return e.base }

// Auth is the x-api-key key, or nil.
func (e *Endpoint) Auth() provider.Auth { return e.auth }

// Request builds a Messages request; an Anthropic client's anthropic-beta
// header goes with it.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	t.Protocol = provider.Anthropic
	b, err := provider.BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	return &provider.Outbound{Path: "/v1/messages", Header: headers(in.Protocol, t.Beta), Body: b.Body, PromptTokens: b.PromptTokens}, nil
}

// headers are a Messages call's protocol headers.
func headers(client provider.Protocol, beta string) http.Header {
	h := http.Header{}
	h.Set("anthropic-version", provider.AnthropicVersion)
	if client == provider.Anthropic && beta != "" {
		h.Set("anthropic-beta", beta)
	}
	return h
}

// CountRequest builds a count_tokens call for an Anthropic client's
// Messages body on model (provider.TokenCounter).
func (e *Endpoint) CountRequest(body []byte, model, beta string) (*provider.Outbound, error) {
	b, err := provider.WithModel(body, model)
	if err != nil {
		return nil, err
	}
	return &provider.Outbound{Path: "/v1/messages/count_tokens", Header: headers(provider.Anthropic, beta), Body: b}, nil
}

// Decode reads a message.
func (e *Endpoint) Decode(_ provider.Op, body []byte) (*provider.Response, error) {
	return provider.DecodeResponse(provider.Anthropic, body)
}

// Scan reads a message's usage without decoding it (provider.Scanner).
func (e *Endpoint) Scan(op provider.Op, body []byte) (gw.Usage, bool) {
	if op != provider.OpChat {
		return gw.Usage{}, false
	}
	return provider.ScanResponse(provider.Anthropic, body)
}

var _ provider.Scanner = (*Endpoint)(nil)

// Stream reads Messages stream events.
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder {
	return provider.SSEStream(body, provider.NewDecoder(provider.Anthropic))
}

// Fault reads Anthropic's error shape and classifies it (docs/providers.md).
func (e *Endpoint) Fault(status int, _ http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := provider.ParseError(status, body)
	k, c := provider.Classify(ue)
	return ue, k, c
}

// StreamFault classifies an "event: error".
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return provider.ClassifyStreamError(ue)
}
