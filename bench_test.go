package oncegate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// The cost of reaching the gateway: the same SDK call, each with a
// distinct body (no join flatters it), in process through HTTPClient and
// over loopback to Handler served as `serve` serves it. The provider is
// the mock over loopback in both. Compare ns/op, and the CPU of each run
// (go test -bench 'Reach' -benchtime 5000x -cpuprofile or /usr/bin/time).
func BenchmarkReachInProcess(b *testing.B) {
	benchReach(b, func(t testing.TB, gwHTTP func(string) *http.Client, h http.Handler) (string, *http.Client) {
		return "http://oncegate/v1/", gwHTTP("sk-lib-app")
	})
}

func BenchmarkReachOverLoopback(b *testing.B) {
	benchReach(b, func(t testing.TB, _ func(string) *http.Client, h http.Handler) (string, *http.Client) {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL + "/v1/", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	})
}

func benchReach(b *testing.B, reach func(testing.TB, func(string) *http.Client, http.Handler) (string, *http.Client)) {
	m := mock.New(mock.Config{Tokens: 8})
	gw := openLib(b, m, nil, "")
	base, hc := reach(b, gw.HTTPClient, gw.Handler())
	cl := openai.NewClient(option.WithBaseURL(base), option.WithHTTPClient(hc), option.WithAPIKey("sk-lib-app"), option.WithMaxRetries(0))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("question " + strconv.Itoa(i))}}); err != nil {
			b.Fatal(err)
		}
	}
}
