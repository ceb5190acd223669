// Command embedded is a small HTTP service that embeds the oncegate
// gateway (docs/library.md): its /summarize endpoint asks a model through
// the official OpenAI SDK, whose calls go to the gateway in process — no
// sidecar, no network hop — and answers with the summary and the id of
// the receipt that records every attempt. The gateway's own API is served
// beside it under /v1/, for receipts and the console.
//
//	ONCEGATE_CONFIG=examples/oncegate.yaml SERVICE_KEY=$ONCEGATE_KEY_ACME go run ./examples/embedded
//
// The environment: ONCEGATE_CONFIG, the gateway's configuration
// (docs/configuration.md), whose *_env names are read from the same
// environment; SERVICE_KEY, the key the service calls its gateway with (a
// tenant's or a virtual key); MODEL, the model it asks (default chat);
// ADDR, where it listens (default 127.0.0.1:8090). SIGINT or SIGTERM
// stops it: the server, then the gateway, each draining what is in
// flight. main_test.go runs it as built, against a mock provider.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gw, err := oncegate.Open(ctx, oncegate.Options{ConfigFile: os.Getenv("ONCEGATE_CONFIG")})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close() // drains what is in flight, then closes the ledger

	model := os.Getenv("MODEL")
	if model == "" {
		model = "chat"
	}
	client := openai.NewClient(
		option.WithBaseURL("http://oncegate/v1/"),
		option.WithHTTPClient(gw.HTTPClient(os.Getenv("SERVICE_KEY"))),
		option.WithMaxRetries(0), // the gateway owns retries
	)
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw.Handler()) // receipts, models, the console's API
	mux.HandleFunc("POST /summarize", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Text == "" {
			http.Error(w, `want {"text": "..."}`, http.StatusBadRequest)
			return
		}
		var requestID string
		opts := []option.RequestOption{option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil {
				requestID = res.Header.Get("X-Oncegate-Request-Id")
			}
			return res, err
		})}
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			opts = append(opts, option.WithHeader("Idempotency-Key", key)) // a client's re-POST joins its first
		}
		res, err := client.Chat.Completions.New(r.Context(), openai.ChatCompletionNewParams{
			Model:    model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Summarize in one sentence:\n\n" + in.Text)},
		}, opts...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"summary": res.Choices[0].Message.Content, "receipt": "/v1/receipts/" + requestID})
	})
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8090"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // waits for the /summarize calls in flight
	}()
	fmt.Printf("summarizer listening on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped // then the deferred Close drains the gateway
}
