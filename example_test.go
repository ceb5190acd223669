package oncegate_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate"
)

// fakeOpenAI is a stand-in for a provider, so the examples run anywhere.
func fakeOpenAI() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the provider."},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`)
	}))
}

// exampleConfig is a configuration as `oncegate serve` reads it
// (docs/configuration.md); PROVIDER is the fake's address.
const exampleConfig = `
store: memory://
tenants: [{id: my-service, api_key_env: MY_SERVICE_KEY}]
providers: [{id: openai, type: openai, base_url: "PROVIDER/v1", api_key_env: OPENAI_API_KEY}]
routes:
  - {id: gpt-4o, provider: openai, model: gpt-4o, behavior_class: gpt-4o, data_boundary: external, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 128000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
models: [{name: gpt-4o, routes: [gpt-4o]}]
`

// Open a gateway in process and call it with the official OpenAI SDK
// through HTTPClient: no socket, the SDK's own retries off.
func Example() {
	provider := fakeOpenAI()
	defer provider.Close()

	gw, err := oncegate.Open(context.Background(), oncegate.Options{
		Config: []byte(strings.ReplaceAll(exampleConfig, "PROVIDER", provider.URL)),
		Env:    map[string]string{"MY_SERVICE_KEY": "sk-my-service", "OPENAI_API_KEY": "sk-provider"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close() // drains the requests in flight, like SIGTERM

	client := openai.NewClient(
		option.WithBaseURL("http://oncegate/v1/"),
		option.WithHTTPClient(gw.HTTPClient("sk-my-service")),
		option.WithMaxRetries(0), // the gateway owns retries
	)
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Choices[0].Message.Content)
	// Output: Hello from the provider.
}

// Serve the gateway's whole HTTP surface from your own server, beside
// your own routes.
func ExampleGateway_Handler() {
	provider := fakeOpenAI()
	defer provider.Close()
	gw, err := oncegate.Open(context.Background(), oncegate.Options{
		Config: []byte(strings.ReplaceAll(exampleConfig, "PROVIDER", provider.URL)),
		Env:    map[string]string{"MY_SERVICE_KEY": "sk-my-service", "OPENAI_API_KEY": "sk-provider"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()

	mux := http.NewServeMux()
	mux.Handle("/v1/", gw.Handler())
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "my own route") })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-my-service")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, strings.Contains(string(body), `"id":"gpt-4o"`))
	// Output: 200 true
}
