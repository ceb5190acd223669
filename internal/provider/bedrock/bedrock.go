// Package bedrock is the `bedrock` provider type: Amazon Bedrock's Converse
// and ConverseStream APIs (docs/providers.md).
//
// It translates the neutral request of package provider into a Converse
// body, decodes a Converse answer and a ConverseStream (the AWS binary
// event-stream framing) into neutral answers and events, classifies
// Bedrock's exceptions into outcome kinds (docs/retries.md), and signs each
// request with SigV4 for the service "bedrock" from the AWS default
// credential chain. Signing, credentials and the event-stream framing are
// the maintained modules of aws-sdk-go-v2; nothing here is hand-written
// cryptography.
//
// Every function is pure over its input except Auth, which holds the
// credentials; the gateway calls them again on every attempt.
package bedrock

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/smithy-go/encoding/httpbinding"
)

// Name is the provider type's name in the configuration.
const Name = "bedrock"

// SigningName is the SigV4 service name Bedrock's runtime endpoint checks.
const SigningName = "bedrock"

// Config is a `bedrock` provider's configuration keys beyond id, type and
// timeouts (docs/providers.md).
type Config struct {
	// Region is required: it names the endpoint and the signing region.
	Region string
	// BaseURL overrides the endpoint; empty:
	// https://bedrock-runtime.{region}.amazonaws.com.
	BaseURL string
	// Profile selects a shared-config profile (aws_profile); empty: the
	// default chain (AWS_PROFILE, else "default").
	Profile string
}

// Keys lists the provider's configuration keys beyond id, type and
// timeouts, for the strict config check.
var Keys = []string{"region", "base_url", "aws_profile"}

// Validate checks the keys: a region is required, and it and an override
// must be usable in a URL.
func (c Config) Validate() error {
	if c.Region == "" {
		return errors.New("bedrock: region is required")
	}
	for _, r := range c.Region {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("bedrock: region %q is not a region name (like us-east-1)", c.Region)
		}
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("bedrock: base_url %q is not an http(s) URL", c.BaseURL)
		}
	}
	return nil
}

// Endpoint is the base URL requests go to: the override, else the
// region's runtime endpoint. It has no trailing slash.
func (c Config) Endpoint() string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	return "https://bedrock-runtime." + c.Region + ".amazonaws.com"
}

// Path is the request path of one attempt for a route's model (a model id,
// an inference-profile id or an ARN, escaped as one path segment as the
// AWS SDKs escape it — every byte but RFC 3986's unreserved ones):
// /model/{modelId}/converse or /model/{modelId}/converse-stream.
func Path(model string, stream bool) string {
	op := "/converse"
	if stream {
		op = "/converse-stream"
	}
	return "/model/" + httpbinding.EscapePath(model, true) + op
}

// Continuations lists the route continuation capabilities a bedrock route
// may declare (docs/streaming.md): a trailing assistant message is sent
// as is (Converse passes it to the model as the start of its answer for
// the models that accept a prefill — Anthropic Claude models before the
// ones that answer 400 to it, which is why it is declared per route,
// never assumed), and Converse has no prefix flag nor
// continue_final_message.
var Continuations = []string{"none", "assistant_prefill"}
