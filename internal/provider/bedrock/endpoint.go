package bedrock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// Protocol is Converse's wire protocol: no client speaks it, so a request
// always reaches a bedrock route translated.
const Protocol provider.Protocol = "bedrock"

// Converse is the "bedrock" provider type (docs/providers.md).
var Converse provider.Type = converseType{}

type converseType struct{}

// Spec declares the type: Converse's protocol, its keys (region
// required), and assistant_prefill as the one continuation Converse has.
func (converseType) Spec() provider.Spec {
	return provider.Spec{Protocol: Protocol, Required: []string{"region"}, Allowed: Keys,
		Continuations: []string{provider.ContinuePrefill}}
}

// Open resolves the provider's AWS credential chain (no network I/O:
// credentials are fetched on first use, or by Auth().Ready).
func (converseType) Open(cfg provider.Config) (provider.Endpoint, error) {
	c := Config{Region: cfg.Provider.Region, BaseURL: cfg.Provider.BaseURL, Profile: cfg.Provider.AWSProfile}
	auth, err := NewAuth(context.Background(), c)
	if err != nil {
		if c.Profile != "" {
			return nil, fmt.Errorf("aws_profile %q: %w", c.Profile, err)
		}
		return nil, err
	}
	return &Endpoint{cfg: c, auth: &signer{Auth: auth, cfg: c}}, nil
}

// Uncarried lists the fields of a client request that Converse cannot
// carry although the other client protocol could (provider.FieldLimiter):
// those the bedrock column makes native only and the OpenAI ↔ Anthropic
// table does not — parallel_tool_calls: false, Anthropic's
// disable_parallel_tool_use — an image by URL, which Converse cannot
// fetch, and, failing those, the field Build would refuse (tool_choice
// none in a conversation that used tools: Converse has no "none" and
// wants its tools whenever the history holds tool calls). The gateway
// then skips bedrock routes for the request — a route that can carry it
// serves — instead of failing it on them.
func (converseType) Uncarried(in *provider.ClientRequest) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(in.Body, &top) != nil {
		return nil
	}
	var out []string
	for name, v := range top {
		if FateOf(in.Protocol, name, v) == provider.FateNativeOnly && provider.FateOf(in.Protocol, name, v) != provider.FateNativeOnly {
			out = append(out, name)
		}
	}
	if imageByURL(top["messages"]) {
		out = append(out, "messages (an image by URL)")
	}
	if len(out) == 0 && in.IR != nil {
		// What the field table cannot see: values Converse refuses in
		// their context. Build refuses exactly what Request would.
		var ire *provider.InvalidRequestError
		if _, err := Build(in.IR, 0); errors.As(err, &ire) {
			out = append(out, ire.Param+" ("+ire.Message+")")
		}
	}
	slices.Sort(out)
	return out
}

// imageByURL reports a message part that is an image by http(s) URL —
// OpenAI's image_url with a URL that is not data:, Anthropic's image
// with a url source — which Converse cannot fetch.
func imageByURL(messages json.RawMessage) bool {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(messages, &msgs) != nil {
		return false
	}
	for _, m := range msgs {
		var parts []struct {
			ImageURL *struct {
				URL string `json:"url"`
			} `json:"image_url"`
			Source *struct {
				Type string `json:"type"`
			} `json:"source"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue // text content
		}
		for _, p := range parts {
			if p.ImageURL != nil && !strings.HasPrefix(p.ImageURL.URL, "data:") || p.Source != nil && p.Source.Type == "url" {
				return true
			}
		}
	}
	return false
}

// Endpoint is one configured bedrock provider.
type Endpoint struct {
	cfg  Config
	auth *signer
}

// NewEndpoint returns the endpoint of cfg whose requests auth signs.
func NewEndpoint(cfg Config, auth *Auth) *Endpoint {
	return &Endpoint{cfg: cfg, auth: &signer{Auth: auth, cfg: cfg}}
}

// BaseURL is the base_url override, else the region's runtime endpoint.
func (e *Endpoint) BaseURL() string { return e.cfg.Endpoint() }

// Auth signs every request with SigV4.
func (e *Endpoint) Auth() provider.Auth { return e.auth }

// Request builds a Converse (or, streaming, ConverseStream) call on the
// route's model.
func (e *Endpoint) Request(in *provider.ClientRequest, t provider.Target, prefix *string) (*provider.Outbound, error) {
	if in.Protocol == provider.Embeddings {
		return nil, &provider.InvalidRequestError{Param: "model", Message: "bedrock routes serve no embeddings"}
	}
	b, err := BuildRequest(in, t, prefix)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if t.Stream {
		h.Set("Accept", "application/vnd.amazon.eventstream")
	} else {
		h.Set("Accept", "application/json")
	}
	return &provider.Outbound{Path: Path(t.Model, t.Stream), Header: h, Body: b.Body, PromptTokens: b.PromptTokens}, nil
}

// Decode reads a Converse answer. Converse does not name the model; the
// gateway names the route's.
func (e *Endpoint) Decode(op provider.Op, body []byte) (*provider.Response, error) {
	if op != provider.OpChat {
		return nil, errors.New("bedrock: only Converse answers")
	}
	return DecodeResponse(body, "")
}

// Stream reads a ConverseStream body in the AWS event-stream framing.
func (e *Endpoint) Stream(body io.Reader) provider.StreamDecoder {
	br := bufio.NewReaderSize(body, 32<<10)
	return &streamDecoder{s: NewStream(br, ""), br: br}
}

// Fault reads and classifies a Bedrock error (Classify). An expired
// credential drops the cached one, so the next attempt signs with new.
func (e *Endpoint) Fault(status int, h http.Header, body []byte) (*provider.UpstreamError, gw.Kind, gw.Cause) {
	ue := ParseError(status, h, body)
	if IsExpiredCredential(ue) {
		e.auth.Invalidate()
	}
	k, c := Classify(ue)
	return ue, k, c
}

// StreamFault classifies an exception inside a ConverseStream.
func (e *Endpoint) StreamFault(ue *provider.UpstreamError) (gw.Kind, gw.Cause) {
	return ClassifyStream(ue)
}

// signer is the provider.Auth of an endpoint.
type signer struct {
	*Auth
	cfg Config
}

// Authenticate signs req with SigV4 (Auth.Sign).
func (s *signer) Authenticate(ctx context.Context, req *http.Request, body []byte) error {
	return s.Sign(ctx, req, body)
}

// Ready obtains a credential from the chain.
func (s *signer) Ready(ctx context.Context) error {
	_, err := s.Check(ctx)
	return err
}

// Describe names the signature and where its credentials come from.
func (s *signer) Describe() string {
	from := "the AWS default credential chain"
	if s.cfg.Profile != "" {
		from = "AWS profile " + s.cfg.Profile
	}
	if src := s.Source(); src != "" {
		from += " (" + src + ")"
	}
	return fmt.Sprintf("SigV4 for bedrock in %s from %s", s.cfg.Region, from)
}

// streamDecoder adapts Stream to provider.StreamDecoder.
type streamDecoder struct {
	s  *Stream
	br *bufio.Reader
}

func (d *streamDecoder) Next(out []provider.Event) ([]provider.Event, error) {
	out, err := d.s.Next(out)
	var me *MalformedError
	if errors.As(err, &me) {
		return out, fmt.Errorf("%w: %w", provider.ErrMalformedEvent, err)
	}
	if errors.Is(err, ErrTooLarge) {
		return out, fmt.Errorf("%w: %w", provider.ErrFrameTooLarge, err)
	}
	return out, err
}

func (d *streamDecoder) Pending() bool { return d.br.Buffered() > 0 }
