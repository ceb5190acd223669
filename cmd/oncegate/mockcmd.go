package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/oncegate/oncegate/internal/mock"
)

// mockProvider runs the fault-injecting mock provider (docs/mock.md).
func mockProvider(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("mock", "[--listen ADDR] [--script FILE] [--ttft D] [--interval D] [--tokens N] [--seed N]",
		"Run the fault-injecting mock provider (docs/mock.md): OpenAI Chat Completions, Responses and embeddings, Anthropic Messages.", "", stderr)
	listen := fs.String("listen", "127.0.0.1:9090", "address to listen on")
	script := fs.String("script", "", "JSON fault script (docs/mock.md, \"The fault script\")")
	ttft := fs.Duration("ttft", 0, "time to first token")
	interval := fs.Duration("interval", 0, "time between tokens")
	tokens := fs.Int("tokens", 24, "tokens per answer")
	seed := fs.Int64("seed", 0, "text seed")
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
	fmt.Fprintf(stdout, "mock provider on http://%s (OpenAI: /v1/chat/completions, Anthropic: /v1/messages, stats: /mock/stats)\n", ln.Addr())
	if err := mock.New(cfg).Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "oncegate mock: %v\n", err)
		return 1
	}
	return 0
}
