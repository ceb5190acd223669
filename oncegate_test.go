package oncegate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate"
	"github.com/oncegate/oncegate/internal/mock"
)

// libConfig is a gateway of one tenant and two OpenAI-protocol routes and
// one Anthropic route on the mock provider at MOCK.
const libConfig = `
admin_key_env: LIB_ADMIN
store: memory://
tenants: [{id: app, api_key_env: LIB_KEY}]
providers:
  - {id: p1, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}
  - {id: an, type: anthropic, base_url: "MOCK", api_key_env: LIB_ANTHROPIC, timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}
routes:
  - {id: primary, provider: p1, model: primary-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: assistant_prefill}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
  - {id: claude, provider: an, model: claude-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: assistant_prefill}, price: {input_usd_per_mtok: 3, output_usd_per_mtok: 6}}
models:
  - {name: chat, routes: [primary], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
  - {name: claude, routes: [claude], retry: {max_attempts: 2, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
`

var libEnv = map[string]string{"LIB_ADMIN": "sk-lib-admin", "LIB_KEY": "sk-lib-app", "LIB_ANTHROPIC": "sk-ant-test"}

// held stands in front of the mock: while closed, every request waits at
// it until released; arrivals says how many have come.
type held struct {
	next     http.Handler
	mu       sync.Mutex
	open     chan struct{}
	arrivals chan struct{}
}

func newHeld(next http.Handler) *held {
	return &held{next: next, open: make(chan struct{}), arrivals: make(chan struct{}, 64)}
}

func (h *held) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.arrivals <- struct{}{}
	h.mu.Lock()
	open := h.open
	h.mu.Unlock()
	select {
	case <-open:
	case <-r.Context().Done():
		return
	}
	h.next.ServeHTTP(w, r)
}

func (h *held) release() { close(h.open) }

// openLib opens an embedded gateway over a mock behind front (nil: the
// mock itself).
func openLib(t testing.TB, m *mock.Mock, front func(http.Handler) http.Handler, extra string) *oncegate.Gateway {
	t.Helper()
	var h http.Handler = m
	if front != nil {
		h = front(m)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	gw, err := oncegate.Open(context.Background(), oncegate.Options{Config: []byte(strings.ReplaceAll(libConfig, "MOCK", srv.URL) + extra), Env: libEnv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw
}

// receiptOf reads a receipt through the gateway's own surface, in
// process, with the admin key.
func receiptOf(t *testing.T, gw *oncegate.Gateway, id string) (rc struct {
	Attempts []struct {
		Route string `json:"route"`
	} `json:"attempts"`
	Terminal string `json:"terminal"`
	Totals   struct {
		Attempts int `json:"attempts"`
	} `json:"totals"`
}) {
	t.Helper()
	res, err := gw.HTTPClient("sk-lib-admin").Get("http://oncegate/v1/receipts/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || json.Unmarshal(b, &rc) != nil {
		t.Fatalf("receipt %s: %d %s", id, res.StatusCode, b)
	}
	return rc
}

// captured records the response headers an SDK saw.
func captured(dst *http.Header) option.Middleware {
	return func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if res != nil {
			*dst = res.Header.Clone()
		}
		return res, err
	}
}

// The official SDKs work unchanged through HTTPClient, with their own
// retries off: a JSON answer, a stream read chunk by chunk, an Anthropic
// message — each one logical request whose receipt lists exactly the
// calls the provider received, faults included.
func TestTheSDKsThroughHTTPClient(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 6})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", FirstCalls: 2, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	gw := openLib(t, m, nil, "")
	var hdr http.Header
	oc := openai.NewClient(option.WithBaseURL("http://oncegate/v1/"), option.WithHTTPClient(gw.HTTPClient("sk-lib-app")),
		option.WithMaxRetries(0), option.WithMiddleware(captured(&hdr)))
	res, err := oc.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("through the library")}})
	if err != nil || len(res.Choices) != 1 || res.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %v %+v", err, res)
	}
	id := hdr.Get("X-Oncegate-Request-Id")
	rc := receiptOf(t, gw, id)
	if calls := m.Stats().ByRequestID[id].Requests; rc.Totals.Attempts != 3 || len(rc.Attempts) != 3 || calls != 3 || rc.Terminal != "succeeded" {
		t.Fatalf("two 503s then an answer: receipt %d attempts (%s), the provider saw %d calls", rc.Totals.Attempts, rc.Terminal, calls)
	}

	stream := oc.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a stream, please")}})
	var text strings.Builder
	chunks := 0
	for stream.Next() {
		chunks++
		if len(stream.Current().Choices) > 0 {
			text.WriteString(stream.Current().Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || chunks < 6 || text.Len() == 0 {
		t.Fatalf("stream: %v after %d chunks, %q", err, chunks, text.String())
	}
	id = hdr.Get("X-Oncegate-Request-Id")
	if rc := receiptOf(t, gw, id); rc.Totals.Attempts != 1 || m.Stats().ByRequestID[id].Requests != 1 {
		t.Fatalf("stream: %d attempts, %d calls", rc.Totals.Attempts, m.Stats().ByRequestID[id].Requests)
	}

	var ahdr http.Header
	ac := anthropic.NewClient(aopt.WithBaseURL("http://oncegate/"), aopt.WithHTTPClient(gw.HTTPClient("sk-lib-app")), aopt.WithMaxRetries(0),
		aopt.WithMiddleware(func(r *http.Request, next aopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil {
				ahdr = res.Header.Clone()
			}
			return res, err
		}))
	msg, err := ac.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("and in Anthropic's protocol"))}})
	if err != nil || len(msg.Content) == 0 {
		t.Fatalf("messages: %v", err)
	}
	id = ahdr.Get("X-Oncegate-Request-Id")
	if rc := receiptOf(t, gw, id); rc.Totals.Attempts != 1 || rc.Attempts[0].Route != "claude" || m.Stats().ByRequestID[id].Requests != 1 {
		t.Fatalf("messages: %+v, %d calls", rc, m.Stats().ByRequestID[id].Requests)
	}

	// A key the gateway does not know is refused as over HTTP.
	nobody := openai.NewClient(option.WithBaseURL("http://oncegate/v1/"), option.WithHTTPClient(gw.HTTPClient("sk-nobody")), option.WithMaxRetries(0))
	_, err = nobody.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 {
		t.Fatalf("an unknown key: %v", err)
	}
}

// metric reads one sample of the gateway's Prometheus metrics (0 when
// absent).
func metric(t *testing.T, gw *oncegate.Gateway, line string) bool {
	t.Helper()
	rec := httptest.NewRecorder()
	gw.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

// within waits for cond, failing the test after patience (generous: the
// machine may be loaded; the condition is an event, not a guess).
func within(t *testing.T, patience time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", patience, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two goroutines send the same request with one Idempotency-Key: one
// generation, one upstream call, one receipt, the same answer for both.
func TestTwoGoroutinesWithOneKeyMakeOneGeneration(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 5})
	var h *held
	gw := openLib(t, m, func(next http.Handler) http.Handler { h = newHeld(next); return h }, "")
	oc := openai.NewClient(option.WithBaseURL("http://oncegate/v1/"), option.WithHTTPClient(gw.HTTPClient("sk-lib-app")), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("once")}}
	type result struct {
		text, id string
		err      error
	}
	results := make(chan result, 2)
	ask := func() {
		var hdr http.Header
		res, err := oc.Chat.Completions.New(context.Background(), params, option.WithHeader("Idempotency-Key", "order-42"), option.WithMiddleware(captured(&hdr)))
		r := result{err: err, id: hdr.Get("X-Oncegate-Request-Id")}
		if err == nil {
			r.text = res.Choices[0].Message.Content
		}
		results <- r
	}
	go ask()
	<-h.arrivals // the first is at the provider
	go ask()
	within(t, 30*time.Second, "the second joins the first", func() bool { return metric(t, gw, `oncegate_dedup_total{result="joined"} 1`) })
	h.release()
	a, b := <-results, <-results
	if a.err != nil || b.err != nil || a.text != b.text || a.id != b.id {
		t.Fatalf("two answers: %+v, %+v", a, b)
	}
	if n := m.Stats().Requests; n != 1 {
		t.Fatalf("the provider saw %d calls, want 1", n)
	}
	if rc := receiptOf(t, gw, a.id); rc.Totals.Attempts != 1 {
		t.Fatalf("receipt: %+v", rc)
	}
}

// Close drains like SIGTERM: a stream in flight finishes, a request that
// arrives during the drain is refused with 503 draining, and Close
// returns once the stream has ended.
func TestCloseDrainsTheRequestsInFlight(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 5})
	var h *held
	gw := openLib(t, m, func(next http.Handler) http.Handler { h = newHeld(next); return h }, "")
	oc := openai.NewClient(option.WithBaseURL("http://oncegate/v1/"), option.WithHTTPClient(gw.HTTPClient("sk-lib-app")), option.WithMaxRetries(0))
	streamed := make(chan string, 1)
	go func() {
		s := oc.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("finish me")}})
		var b strings.Builder
		for s.Next() {
			if len(s.Current().Choices) > 0 {
				b.WriteString(s.Current().Choices[0].Delta.Content)
			}
		}
		if s.Err() != nil {
			b.WriteString(" error: " + s.Err().Error())
		}
		streamed <- b.String()
	}()
	<-h.arrivals
	closed := make(chan error, 1)
	go func() { closed <- gw.Close() }()
	within(t, 30*time.Second, "new requests are refused while draining", func() bool {
		_, err := oc.Models.List(context.Background())
		var ae *openai.Error
		return errors.As(err, &ae) && ae.StatusCode == 503 && ae.Code == "draining"
	})
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the stream in flight ended", err)
	default:
	}
	h.release()
	if text := <-streamed; text == "" || strings.Contains(text, "error") {
		t.Fatalf("the stream in flight: %q", text)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// Open refuses what it cannot honour, naming it.
func TestOpenNamesWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		o    oncegate.Options
		want string
	}{
		{oncegate.Options{}, "no configuration"},
		{oncegate.Options{ConfigFile: "x.yaml", Config: []byte("{}")}, "both set"},
		{oncegate.Options{ConfigFile: "/nonexistent/oncegate.yaml"}, "/nonexistent/oncegate.yaml"},
		{oncegate.Options{Config: []byte(strings.ReplaceAll(libConfig, "MOCK", "http://127.0.0.1:1")), Env: map[string]string{}}, "LIB_KEY"},
		{oncegate.Options{Config: []byte(strings.ReplaceAll(libConfig, "MOCK", "http://127.0.0.1:1")), Env: libEnv, Coordination: "redis://127.0.0.1:1/0"}, "use postgres://"},
	} {
		_, err := oncegate.Open(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.o, err, c.want)
		}
	}
}
