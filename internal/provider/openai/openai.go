// Package openai is the provider types of OpenAI's APIs (docs/providers.md):
// "openai", Chat Completions (and embeddings) with an Authorization: Bearer
// key, and "openai-responses", the stateful Responses API
// (docs/conversations.md). The wire formats themselves are package
// provider's, which clients speak too.
package openai

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Chat is the "openai" type: Chat Completions at {base_url}/chat/completions
// and embeddings at {base_url}/embeddings.
var Chat provider.Type = chatType{}

// Responses is the "openai-responses" type: the Responses API, whose
// conversations live upstream. Its attempts are built by the gateway's
// conversation path (docs/conversations.md); the Endpoint reads them.
var Responses provider.Type = responsesType{}

// keys are both types' configuration keys.
var (
	required = []string{"base_url"}
	allowed  = []string{"base_url", "api_key_env", "api_key_file"}
)

type chatType struct{}

func (chatType) Spec() provider.Spec {
	return provider.Spec{Protocol: provider.OpenAI, Required: required, Allowed: allowed, Embeddings: true,
		Continuations: []string{provider.ContinuePrefill, provider.ContinuePrefix, provider.ContinueFinalMsg}}
}

func (chatType) Open(cfg provider.Config) (provider.Endpoint, error) {
	return &Endpoint{base: strings.TrimRight(cfg.Provider.BaseURL, "/"), auth: provider.StaticKey(cfg, "Authorization", "Bearer ")}, nil
}

// Endpoint is one OpenAI-protocol provider: "openai", and the base that
// other OpenAI-compatible types (azure-openai) build on.
type Endpoint struct {
	base string
	auth provider.Auth
}

// NewEndpoint returns an OpenAI-protocol endpoint at base with auth.
func NewEndpoint(base string, auth provider.Auth) *Endpoint { return &Endpoint{base: base, auth: auth} }

// BaseURL is the configured base URL.
func (e *Endpoint) BaseURL() string { return e.base }

// Auth is the bearer key, or nil.
func (e *Endpoint) Auth() provider.Auth { return e.auth }

// Request builds a Chat Completions or embeddings request.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	return Build(in, t, prefix, "/chat/completions", "/embeddings")
}

// Build writes an OpenAI-protocol request on the given paths.
func Build(in *provider.ClientRequest, t provider.Target, prefix *string, chatPath, embeddingsPath string) (*provider.Outbound, error) {
	path := chatPath
	t.Protocol = provider.OpenAI
	if in.Protocol == provider.Embeddings {
		path, t.Protocol = embeddingsPath, provider.Embeddings
	}
	b, err := provider.BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	return &provider.Outbound{Path: path, Body: b.Body, PromptTokens: b.PromptTokens}, nil
}

// Decode reads a chat completion or an embeddings list.
func (e *Endpoint) Decode(op provider.Op, body []byte) (*provider.Response, error) {
	if op == provider.OpEmbeddings {
		return provider.DecodeResponse(provider.Embeddings, body)
	}
	return provider.DecodeResponse(provider.OpenAI, body)
}

// Scan reads a chat completion's or an embeddings list's usage without
// decoding it (provider.Scanner).
func (e *Endpoint) Scan(op provider.Op, body []byte) (gw.Usage, bool) {
	if op == provider.OpEmbeddings {
		return provider.ScanResponse(provider.Embeddings, body)
	}
	return provider.ScanResponse(provider.OpenAI, body)
}

var _ provider.Scanner = (*Endpoint)(nil)

// Stream reads chat.completion.chunk events.
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder {
	return provider.SSEStream(body, provider.NewDecoder(provider.OpenAI))
}

// Fault reads OpenAI's error shape and classifies it (docs/providers.md).
func (e *Endpoint) Fault(status int, _ http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := provider.ParseError(status, body)
	k, c := provider.Classify(ue)
	return ue, k, c
}

// StreamFault classifies an {"error":…} chunk.
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return provider.ClassifyStreamError(ue)
}

type responsesType struct{}

func (responsesType) Spec() provider.Spec {
	return provider.Spec{Protocol: provider.Responses, Required: required, Allowed: allowed, Stateful: true}
}

func (responsesType) Open(cfg provider.Config) (provider.Endpoint, error) {
	return &responsesEndpoint{Endpoint{base: strings.TrimRight(cfg.Provider.BaseURL, "/"), auth: provider.StaticKey(cfg, "Authorization", "Bearer ")}}, nil
}

// errStatefulPath: a stateful route's turns are built by the gateway's
// conversation path, never from a chat request.
var errStatefulPath = errors.New("an openai-responses route serves /v1/responses only")

// responsesEndpoint is an "openai-responses" provider.
type responsesEndpoint struct{ Endpoint }

func (e *responsesEndpoint) Request(in *provider.ClientRequest, _ provider.Target, _ *string) (*provider.Outbound, error) {
	return nil, fmt.Errorf("%s request: %w", in.Protocol.Operation(), errStatefulPath)
}

func (e *responsesEndpoint) Decode(_ provider.Op, body []byte) (*provider.Response, error) {
	return provider.DecodeResponse(provider.Responses, body)
}

// Scan vouches for no response object: the conversation path decodes
// every one (it keeps the upstream's id and output).
func (e *responsesEndpoint) Scan(provider.Op, []byte) (gw.Usage, bool) { return gw.Usage{}, false }

func (e *responsesEndpoint) Stream(body io.Reader) provider.StreamDecoder {
	return provider.SSEStream(body, provider.NewDecoder(provider.Responses))
}
