package oncegate_test

// What `serve` gives an operator — reload, metrics, traces, the access
// log — tested through the library's options and methods.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate"
	"github.com/oncegate/oncegate/internal/mock"
)

// ask makes one chat call through c and returns its answer's request id.
func ask(c openai.Client, model, text string, opts ...option.RequestOption) (string, error) {
	var hdr http.Header
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}, append(opts, option.WithMiddleware(captured(&hdr)))...)
	if hdr == nil {
		return "", err
	}
	return hdr.Get("X-Oncegate-Request-Id"), err
}

// sdk is the OpenAI SDK over gw's HTTPClient with key, its retries off.
func sdk(gw *oncegate.Gateway, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://oncegate/v1/"), option.WithHTTPClient(gw.HTTPClient(key)), option.WithMaxRetries(0))
}

// statusOf is the HTTP status of an SDK error (0 if it is none).
func statusOf(err error) int {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// Reload reads the file again: a model added to it answers the next call
// through HTTPClient; a file that does not validate, or that changes what
// cannot change while the gateway runs, is refused with the reason and
// the configuration in force stays. The admin API's reload calls the
// same.
func TestReloadSwapsTheConfigurationForTheNextCall(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 4})
	srv := httptest.NewServer(m)
	defer srv.Close()
	base := strings.ReplaceAll(libConfig, "MOCK", srv.URL)
	file := filepath.Join(t.TempDir(), "oncegate.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(base)
	gw, err := oncegate.Open(context.Background(), oncegate.Options{ConfigFile: file, Env: libEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	oc := sdk(gw, "sk-lib-app")
	if _, err := ask(oc, "fast", "before"); statusOf(err) != 404 {
		t.Fatalf("a model the configuration lacks: %v, want 404", err)
	}

	withFast := base + "  - {name: fast, routes: [primary], retry: {max_attempts: 1, deadline: 60s}}\n"
	write(withFast)
	if err := gw.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	id, err := ask(oc, "fast", "after")
	if err != nil {
		t.Fatalf("the model the reload added: %v", err)
	}
	if m.Stats().ByRequestID[id].Requests != 1 {
		t.Fatalf("the provider saw %d calls of %s", m.Stats().ByRequestID[id].Requests, id)
	}

	for _, bad := range []struct{ file, want string }{
		{withFast + "  - {name: broken, routes: [no-such-route]}\n", "no-such-route"},
		{strings.Replace(withFast, "store: memory://", "store: sqlite://elsewhere.db", 1), "store cannot change"},
		{"tenants: [", "yaml"},
	} {
		write(bad.file)
		if err := gw.Reload(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Reload of a bad file: %v, want an error naming %q", err, bad.want)
		}
		if _, err := ask(oc, "fast", "the old configuration stays"); err != nil {
			t.Fatalf("after a refused reload: %v", err)
		}
	}

	// POST /v1/admin/reload, through the admin key, is the same Reload.
	write(base)
	res, err := gw.HTTPClient("sk-lib-admin").Post("http://oncegate/v1/admin/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"reloaded":true`) {
		t.Fatalf("admin reload: %d %s", res.StatusCode, b)
	}
	if _, err := ask(oc, "fast", "removed again"); statusOf(err) != 404 {
		t.Fatalf("the model the admin reload removed: %v, want 404", err)
	}

	fromBytes := openLib(t, m, nil, "")
	if err := fromBytes.Reload(); err == nil || !strings.Contains(err.Error(), "no file to reload") {
		t.Fatalf("Reload of a gateway opened from Options.Config: %v", err)
	}
}

// metrics reads the gateway's Prometheus text from h.
func metricsText(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// sample is the value of the sample named line in a Prometheus text (-1
// when absent).
func sample(text, name string) float64 {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == name {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// MetricsHandler counts what was asked through HTTPClient: the logical
// requests, their attempts by outcome, the dedup outcomes, the routes'
// selection — the same counters `serve` exports, with no key; the API's
// /metrics asks for the admin key.
func TestMetricsCountTheCallsThroughHTTPClient(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 4})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", FirstCalls: 1, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	gw := openLib(t, m, nil, "")
	oc := sdk(gw, "sk-lib-app")
	const calls = 3
	for i := range calls {
		if _, err := ask(oc, "chat", "count me "+strconv.Itoa(i), option.WithHeader("Idempotency-Key", "count-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The first again, with its key: replayed from the ledger.
	if _, err := ask(oc, "chat", "count me 0", option.WithHeader("Idempotency-Key", "count-0")); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`oncegate_logical_requests_total{model="chat",terminal="succeeded"}`:            calls,
		`oncegate_attempts_total{class="retryable",kind="unavailable",route="primary"}`: 1,
		`oncegate_attempts_total{class="success",kind="ok",route="primary"}`:            calls,
		`oncegate_dedup_total{result="miss"}`:                                           calls,
		`oncegate_dedup_total{result="replayed"}`:                                       1,
		`oncegate_attempts_per_logical_request_count`:                                   calls,
	}
	// A request is counted as it settles, which may be just after its
	// answer reached the client.
	var text string
	counted := func() bool {
		text = metricsText(t, gw.MetricsHandler())
		for name, n := range want {
			if sample(text, name) != n {
				return false
			}
		}
		return true
	}
	if !eventually(30*time.Second, counted) {
		for name, n := range want {
			if got := sample(text, name); got != n {
				t.Errorf("%s = %v, want %v", name, got, n)
			}
		}
		t.Fatalf("the metrics:\n%s", text)
	}

	// Through Handler, the same metrics need the admin key.
	res, err := gw.HTTPClient("sk-lib-app").Get("http://oncegate/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("/metrics with a tenant's key: %d, want 401", res.StatusCode)
	}
	res, err = gw.HTTPClient("sk-lib-admin").Get("http://oncegate/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || sample(string(b), `oncegate_dedup_total{result="replayed"}`) != 1 {
		t.Fatalf("/metrics with the admin key: %d", res.StatusCode)
	}
}

// Options.MetricsListen says the metrics are served elsewhere (by
// MetricsHandler on a private port): a gateway with no admin key then
// says so on its API's /metrics, rather than that it has no admin key.
func TestMetricsListenSendsMetricsToTheirOwnPort(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 4})
	srv := httptest.NewServer(m)
	defer srv.Close()
	conf := []byte(strings.Replace(strings.ReplaceAll(libConfig, "MOCK", srv.URL), "admin_key_env: LIB_ADMIN\n", "", 1))
	for _, c := range []struct {
		listen, want string
	}{
		{"127.0.0.1:9464", "served on the metrics_listen address"},
		{"", "without an admin key"},
	} {
		gw, err := oncegate.Open(context.Background(), oncegate.Options{Config: conf, Env: libEnv, MetricsListen: c.listen})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ask(sdk(gw, "sk-lib-app"), "chat", "one call"); err != nil {
			t.Fatal(err)
		}
		res, err := gw.HTTPClient("sk-lib-app").Get("http://oncegate/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 404 || !strings.Contains(string(b), c.want) {
			t.Errorf("MetricsListen %q: the API's /metrics answered %d %s, want 404 naming %q", c.listen, res.StatusCode, b, c.want)
		}
		within(t, 30*time.Second, "MetricsHandler counts the call", func() bool {
			return sample(metricsText(t, gw.MetricsHandler()), `oncegate_logical_requests_total{model="chat",terminal="succeeded"}`) == 1
		})
		_ = gw.Close()
	}
}

// Options.Tracer records a server span per logical request — a child of
// the caller's trace when it sent a traceparent — and a client span per
// attempt under it, each with its outcome; the provider receives the
// attempt's trace context.
func TestTracerRecordsTheRequestAndItsAttempts(t *testing.T) {
	m := mock.New(mock.Config{Tokens: 4})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", FirstCalls: 2, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	var mu sync.Mutex
	var upstream []string // the traceparent of each call the provider received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstream = append(upstream, r.Header.Get("Traceparent"))
		mu.Unlock()
		m.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	gw, err := oncegate.Open(context.Background(), oncegate.Options{Config: []byte(strings.ReplaceAll(libConfig, "MOCK", srv.URL)), Env: libEnv,
		Tracer: tp.Tracer("oncegate-test")})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()

	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	id, err := ask(sdk(gw, "sk-lib-app"), "chat", "trace me", option.WithHeader("traceparent", "00-"+caller+"-00f067aa0ba902b7-01"))
	if err != nil {
		t.Fatal(err)
	}
	within(t, 30*time.Second, "the request's span ends", func() bool { return len(rec.Ended()) >= 4 })
	var req sdktrace.ReadOnlySpan
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == "chat chat":
			req = s
		case strings.HasPrefix(s.Name(), "attempt "):
			attempts = append(attempts, s)
		}
	}
	if req == nil || len(attempts) != 3 {
		t.Fatalf("spans: %v", names(rec.Ended()))
	}
	attr := func(s sdktrace.ReadOnlySpan, k string) string {
		for _, a := range s.Attributes() {
			if string(a.Key) == k {
				return a.Value.String()
			}
		}
		return ""
	}
	if req.SpanKind() != trace.SpanKindServer || req.SpanContext().TraceID().String() != caller ||
		attr(req, "oncegate.request_id") != id || attr(req, "oncegate.attempts") != "3" || attr(req, "oncegate.terminal") != "succeeded" {
		t.Fatalf("the request's span: kind %v, trace %s, attributes %v", req.SpanKind(), req.SpanContext().TraceID(), req.Attributes())
	}
	mu.Lock()
	defer mu.Unlock()
	for i, a := range attempts {
		want := []string{"503", "503", "200"}[i]
		if a.Parent().SpanID() != req.SpanContext().SpanID() || a.SpanKind() != trace.SpanKindClient ||
			a.Name() != "attempt "+strconv.Itoa(i+1)+" primary" || attr(a, "http.response.status_code") != want {
			t.Errorf("attempt %d's span %q: parent %s, status %s; want under %s with %s", i+1, a.Name(), a.Parent().SpanID(),
				attr(a, "http.response.status_code"), req.SpanContext().SpanID(), want)
		}
		if i < len(upstream) && !strings.Contains(upstream[i], "-"+a.SpanContext().SpanID().String()+"-") {
			t.Errorf("call %d carried traceparent %q, not attempt %d's span %s", i+1, upstream[i], i+1, a.SpanContext().SpanID())
		}
	}
}

// eventually reports whether cond held within patience.
func eventually(patience time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// lockedBuffer is a bytes.Buffer the gateway's goroutines write while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// accessLine is the access log's line for request id in out (JSON lines),
// nil until it is written.
func accessLine(out, id string) map[string]any {
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" && m["request_id"] == id {
			return m
		}
	}
	return nil
}

// Options.AccessLog receives one line per exchange made through
// HTTPClient — the request's id, status, tenant, model, attempts and
// terminal, and a refusal's code — and the Logger none of them; without
// AccessLog, the lines go to the Logger.
func TestTheAccessLogHasALinePerCall(t *testing.T) {
	for _, separate := range []bool{true, false} {
		m := mock.New(mock.Config{Tokens: 4})
		m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "primary-model", FirstCalls: 1, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
		srv := httptest.NewServer(m)
		defer srv.Close()
		conf := []byte(strings.ReplaceAll(libConfig, "MOCK", srv.URL))
		var access, events lockedBuffer
		o := oncegate.Options{Config: conf, Env: libEnv, Logger: slog.New(slog.NewJSONHandler(&events, nil))}
		if separate {
			o.AccessLog = &access
		}
		gw, err := oncegate.Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		lines, other := &access, &events
		if !separate {
			lines, other = &events, &access
		}
		id, err := ask(sdk(gw, "sk-lib-app"), "chat", "log me "+strconv.FormatBool(separate))
		if err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		within(t, 30*time.Second, "the call's access line", func() bool { line = accessLine(lines.String(), id); return line != nil })
		if line["status"] != 200.0 || line["path"] != "/v1/chat/completions" || line["tenant"] != "app" || line["model"] != "chat" ||
			line["attempts"] != 2.0 || line["terminal"] != "succeeded" {
			t.Errorf("AccessLog set %v: the line %v", separate, line)
		}
		if separate && strings.Contains(other.String(), `"msg":"request"`) {
			t.Errorf("with AccessLog set, the Logger has access lines too:\n%s", other.String())
		}
		// A refusal is a line too, with its code.
		if _, err := ask(sdk(gw, "sk-lib-app"), "no-such-model", "x"); statusOf(err) != 404 {
			t.Fatalf("an unknown model: %v", err)
		}
		within(t, 30*time.Second, "the refusal's access line", func() bool {
			return strings.Contains(lines.String(), `"status":404`) && strings.Contains(lines.String(), `"code":"model_not_found"`)
		})
		_ = gw.Close()
		if strings.Contains(lines.String(), "sk-lib-app") || strings.Contains(other.String(), "sk-lib-app") {
			t.Errorf("a key in the logs")
		}
	}
}
