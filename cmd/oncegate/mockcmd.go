package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/oncegate/oncegate/internal/mock"
)

// mockProvider runs the fault-injecting mock provider (docs/mock.md).
func mockProvider(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("mock", "[--listen ADDR] [--script FILE] [--ttft D] [--interval D] [--tokens N] [--seed N] [--service-account FILE]",
		"Run the fault-injecting mock provider (docs/mock.md): OpenAI Chat Completions, Responses and embeddings, Anthropic Messages, Azure OpenAI, Bedrock, Gemini and Vertex AI.", "", stderr)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on")
	script := fs.String("script", "", "JSON fault script (docs/mock.md, \"The fault script\")")
	ttft := fs.Duration("ttft", 0, "time to first token")
	interval := fs.Duration("interval", 0, "time between tokens")
	tokens := fs.Int("tokens", 24, "tokens per answer")
	seed := fs.Int64("seed", 0, "text seed")
	account := fs.String("service-account", "", "write a service-account JSON for the Vertex fake (its token_uri at this mock) to FILE")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	cfg := mock.Config{Seed: *seed, TTFT: *ttft, TokenInterval: *interval, Tokens: *tokens}
	if *script != "" {
		s, err := mock.LoadScript(*script)
		if err != nil {
			fmt.Fprintf(stderr, "oncegate mock: %v\n", err)
			return 1
		}
		cfg.Script = s
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate mock: %v\n", err)
		return 1
	}
	base := "http://" + ln.Addr().String()
	if *account != "" {
		if err := os.WriteFile(*account, mock.ServiceAccountJSON(base), 0o600); err != nil {
			fmt.Fprintf(stderr, "oncegate mock: write service account: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "mock provider on %s (OpenAI: /v1/chat/completions, Anthropic: /v1/messages, Azure: /openai/..., Bedrock: /model/..., Gemini: /v1beta/models/..., Vertex: /v1/projects/..., stats: /mock/stats)\n", base)
	fmt.Fprintf(stdout, "test credentials: Azure api-key %q, Gemini key %q, AWS %s in %s (secret %q)\n",
		mock.DefaultAzureAPIKey, mock.DefaultGeminiAPIKey, mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.Region, mock.DefaultAWS.SecretAccessKey)
	if err := mock.New(cfg).Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "oncegate mock: %v\n", err)
		return 1
	}
	return 0
}
