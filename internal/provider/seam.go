package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// This file is the provider seam (docs/architecture.md, docs/providers.md):
// the one interface a provider type implements. A type lives in its own
// package (internal/provider/openai, …/anthropic, …/azure, …) and is named
// in one table, internal/provider/registry, keyed by the configuration's
// `type`. Nothing outside the registry switches on a provider type: the
// gateway, the policy and the receipts ask a Type (and the Endpoint it
// opens) instead.

// Type is one provider type: what a configuration's `type: NAME` means.
//
// A Type is a constant value, safe for concurrent use. Spec says what the
// type is; Open prepares one configured provider of the type — at start
// and again at every reload — into an Endpoint that builds, authenticates
// and reads every attempt's exchange.
type Type interface {
	// Spec declares the type's wire protocol, configuration keys and
	// capabilities. It never changes.
	Spec() Spec
	// Open prepares the provider cfg describes. It validates what the
	// policy could not (a malformed api_version …) and creates the auth
	// step from the provider's credentials; it does no network I/O (a
	// token source fetches lazily: see Auth.Ready). Its error names the
	// configuration key at fault and never carries a secret.
	Open(cfg Config) (Endpoint, error)
}

// PerConfig is a Type whose Spec depends on a provider's configuration
// (vertex: its publisher decides the wire protocol and continuation).
// The policy asks For once per configured provider and keeps the Type it
// returns as that provider's.
type PerConfig interface {
	For(p *config.Provider) Type
}

// FieldTable is a Type that speaks a protocol no client speaks (gemini)
// and so has its own column of the field table (docs/translation.md):
// which client fields a route of the type carries. A type without one
// uses the other-protocol column (Fields).
type FieldTable interface {
	// NativeOnly lists, sorted, the top-level fields of a client body of
	// protocol p that a route of the type cannot carry: such a route is
	// ineligible for the request, unless each of them may be dropped.
	NativeOnly(p Protocol, body []byte) []string
	// Droppable reports whether field name of protocol p may be dropped
	// for a route of the type (may_drop, X-Oncegate-May-Drop).
	Droppable(p Protocol, name string) bool
}

// Spec is what a provider type declares of itself.
type Spec struct {
	// Protocol is the wire protocol of the type's request and response
	// bodies. A client request in the same protocol is patched, not
	// rebuilt, and a same-protocol answer reaches the client verbatim; a
	// protocol no client speaks (bedrock, gemini) is always translated.
	Protocol Protocol
	// Required and Allowed are the configuration keys beyond id, type,
	// timeouts, headers and query that a provider of the type must set,
	// and may set (Required ⊆ Allowed). `oncegate check` refuses a
	// missing or unknown one with its position.
	Required, Allowed []string
	// Variant names the setting that chose this Spec among a PerConfig
	// type's ("auth: entra"), for messages; "" when the type has one.
	Variant string
	// Continuations are the route continuation styles the type can serve
	// (docs/streaming.md): "assistant_prefill", "prefix_flag",
	// "continue_final_message". "none" is always allowed.
	Continuations []string
	// Embeddings: the type serves POST /v1/embeddings (OpenAI's protocol).
	Embeddings bool
	// Stateful: the conversation lives upstream (openai-responses,
	// docs/conversations.md); an alias is all stateful routes or none.
	Stateful bool
	// CountTokens: the type counts a Messages request's tokens at
	// POST /v1/messages/count_tokens (Anthropic's protocol).
	CountTokens bool
}

// Config is one configured provider, as Open receives it.
type Config struct {
	// Provider is the provider's configuration as written.
	Provider *config.Provider
	// APIKey is the key read from api_key_env or api_key_file ("": none).
	APIKey string
	// KeySource names where APIKey came from, for messages: the variable
	// or the file's name ("": no key). Never the key itself.
	KeySource string
	// Lookup reads the environment (os.LookupEnv outside tests), for a
	// type whose credentials come from a chain of variables and files.
	Lookup func(string) (string, bool)
	// Authority, when set, is where a type that obtains tokens from an
	// identity provider of a cloud's own (azure-openai's Microsoft Entra
	// ID) gets them instead: tests point it at the mock. Nil (always,
	// outside tests): the cloud's.
	Authority *TokenAuthority
}

// TokenAuthority is an identity provider standing in for a cloud's, for
// tests: its root URL and the client that reaches it (and trusts its
// certificate). Every call the credential makes goes through Client.
type TokenAuthority struct {
	// URL is the authority's root, "https://127.0.0.1:4321".
	URL string
	// Client makes the calls.
	Client *http.Client
}

// ConfigError is an Open error about one of the provider's
// configuration keys: `oncegate check` reports it at that key's
// position.
type ConfigError struct {
	Key string // the key's name, "auth"
	Err error
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }

// Op is the operation one attempt performs.
type Op uint8

// The operations.
const (
	OpChat       Op = iota // chat completions / messages: the request's IR
	OpEmbeddings           // embeddings (Spec.Embeddings types only)
)

// Endpoint is one configured provider of a Type: it builds each attempt's
// upstream request, authenticates it, reads its answer into the neutral
// representation (Response, Event) and classifies its faults
// (docs/retries.md). It is immutable and safe for concurrent use; a
// reload opens a new one.
type Endpoint interface {
	// BaseURL is the root the request paths are appended to (the
	// configured base_url, or the type's default).
	BaseURL() string
	// Auth is the step that authenticates every request (nil: requests
	// carry no credential, as for a local server).
	Auth() Auth
	// Request builds one attempt's upstream request for in on the route
	// t describes; a non-nil prefix asks the route to continue a partial
	// answer (docs/streaming.md). in is never modified. An error is the
	// request's (a field the type cannot carry): invalid_request.
	Request(in *ClientRequest, t Target, prefix *string) (*Outbound, error)
	// Decode reads a whole (non-streamed) success body of operation op.
	// An error is a protocol violation.
	Decode(op Op, body []byte) (*Response, error)
	// Stream reads a streamed success body: SSE, or the type's own
	// framing (AWS event-stream for bedrock).
	Stream(body io.Reader) StreamDecoder
	// Fault reads and classifies a non-2xx answer (status, headers and a
	// bounded body): the error as the provider stated it, and its outcome
	// kind with its cause. A refused credential is gw.KindAccountRefused
	// with gw.CauseUpstreamAuth, whatever the provider's shape.
	Fault(status int, h http.Header, body []byte) (*UpstreamError, gw.Kind, gw.Cause)
	// StreamFault classifies an error the provider sent inside a stream
	// (an EvError event) before any visible output.
	StreamFault(e *UpstreamError) (gw.Kind, gw.Cause)
}

// Outbound is one attempt's upstream request, as an Endpoint built it.
type Outbound struct {
	// Method is POST when empty.
	Method string
	// Path is appended to the base URL; it may carry a query
	// ("/openai/deployments/d/chat/completions?api-version=…").
	Path string
	// Header holds the attempt's protocol headers (anthropic-beta …);
	// the gateway adds its own (idempotency key, request id) and the
	// auth step its credential.
	Header http.Header
	Body   []byte
	// PromptTokens is the estimated prompt (package tokens).
	PromptTokens int64
}

// Auth authenticates one configured provider's requests: a static key
// header, or a token or signature source. It is made by Type.Open from
// the provider's configuration, at start and at every reload, and is safe
// for concurrent use.
type Auth interface {
	// Authenticate adds the credential to req, whose body is body, just
	// before it is sent; it may sign the request (SigV4). It must return
	// by ctx's deadline. An error means nothing was sent.
	Authenticate(ctx context.Context, req *http.Request, body []byte) error
	// Ready obtains a credential now — a token, the AWS chain — so that
	// `oncegate check --connect` can say it works; a static key is ready
	// at once.
	Ready(ctx context.Context) error
	// Describe says which credential is used, never its value:
	// "api-key from AZURE_OPENAI_KEY".
	Describe() string
}

// StreamDecoder reads one attempt's stream body into neutral events. It
// keeps state across the stream and is not safe for concurrent use.
type StreamDecoder interface {
	// Next reads the next upstream frame and appends its events to out.
	// A malformed frame returns an error wrapping ErrMalformedEvent: the
	// caller skips it, counts a protocol warning and goes on. Any other
	// error ends the stream: io.EOF, the transport's error, or one
	// wrapping ErrFrameTooLarge (a protocol violation).
	Next(out []Event) ([]Event, error)
	// Pending reports whether more of the stream is already buffered, so
	// the caller can publish what it has before it waits.
	Pending() bool
}

// Stream framing errors (StreamDecoder).
var (
	ErrMalformedEvent = errors.New("malformed stream event")
	ErrFrameTooLarge  = errors.New("stream frame too large")
)

// MaxEventBytes bounds one upstream stream frame.
const MaxEventBytes = 1 << 20

// SSEStream reads an SSE body with a per-protocol Decoder: the framing of
// every type but bedrock.
func SSEStream(body io.Reader, dec Decoder) StreamDecoder {
	return &sseStream{rd: sse.NewReader(body, MaxEventBytes), dec: dec}
}

type sseStream struct {
	rd  *sse.Reader
	dec Decoder
}

func (s *sseStream) Next(out []Event) ([]Event, error) {
	// The decoders keep nothing of the event's data (strings they read
	// are copies): TestDecodersKeepNoEventData.
	ev, err := s.rd.NextView()
	if err != nil {
		if errors.Is(err, sse.ErrTooLarge) {
			return out, fmt.Errorf("%w: %w", ErrFrameTooLarge, err)
		}
		return out, err
	}
	n := len(out)
	out, err = s.dec.Decode(ev, out)
	if err != nil {
		return out[:n], fmt.Errorf("%w: %w", ErrMalformedEvent, err)
	}
	return out, nil
}

func (s *sseStream) Pending() bool { return s.rd.Pending() }

// Release gives the SSE reader's buffer back (Releaser).
func (s *sseStream) Release() { s.rd.Release() }

// Releaser is a StreamDecoder holding a buffer it can give back once the
// stream is over; it must not be used after Release.
type Releaser interface {
	Release()
}

// KeyHeader is the Auth of a static key sent in one header: "x-api-key",
// "api-key", or Authorization with a "Bearer " prefix.
type KeyHeader struct {
	Header string // the header's name
	Prefix string // put before the key ("Bearer ")
	Key    string
	Source string // where the key came from, for Describe
}

// Authenticate sets the header.
func (k *KeyHeader) Authenticate(_ context.Context, req *http.Request, _ []byte) error {
	req.Header.Set(k.Header, k.Prefix+k.Key)
	return nil
}

// Ready reports nothing: a static key is always ready.
func (k *KeyHeader) Ready(context.Context) error { return nil }

// Describe names the header and the key's source.
func (k *KeyHeader) Describe() string {
	name := k.Header
	if k.Prefix != "" {
		name += " " + k.Prefix[:len(k.Prefix)-1]
	}
	return name + " from " + k.Source
}

// StaticKey returns the Auth of cfg's key in header (with prefix), or nil
// when the provider has no key.
func StaticKey(cfg Config, header, prefix string) Auth {
	if cfg.APIKey == "" {
		return nil
	}
	return &KeyHeader{Header: header, Prefix: prefix, Key: cfg.APIKey, Source: cfg.KeySource}
}

// FieldLimiter is a Type that cannot carry some client fields which the
// OpenAI ↔ Anthropic translation carries (docs/translation.md): Uncarried
// lists, sorted, the fields of a client request that it cannot carry —
// whatever its Endpoint.Request would refuse — each named as the
// request spells it, with the reason in parentheses when the field alone
// does not say it. Its routes are ineligible for such a request —
// skipped before dispatch, like a route of the other protocol for a
// native-only field — so that a route that can carry it is tried.
type FieldLimiter interface {
	Uncarried(in *ClientRequest) []string
}

// ModelLookup is an Endpoint that can ask its provider whether a route's
// model or deployment exists, for `oncegate check --connect`
// (docs/providers.md). LookupModel builds that question — a GET on the
// provider's own API, authenticated as every request — or, when the
// provider cannot be asked with the route's credential, returns nil and
// says why. Its answer is read as an attempt's: a 2xx is found, and
// Fault classifies the rest, gw.KindRouteUnavailable meaning the model
// or deployment does not exist.
type ModelLookup interface {
	LookupModel(model string) (out *Outbound, why string)
}

// ModelLister is a ModelLookup whose provider may serve only the list of
// its models (an OpenAI-compatible server such as vLLM has no
// GET /models/{model}): when the lookup answered 404 without an error
// code of the provider's (the path's 404, not the model's), ListModels
// builds the list's GET, and Listed reads whether model is in its answer.
type ModelLister interface {
	ListModels() *Outbound
	Listed(body []byte, model string) bool
}

// TokenCounter is an Endpoint that counts a Messages request's tokens
// (Spec.CountTokens): CountRequest builds the call for an Anthropic
// client's body on model, with its anthropic-beta header.
type TokenCounter interface {
	CountRequest(body []byte, model, beta string) (*Outbound, error)
}
