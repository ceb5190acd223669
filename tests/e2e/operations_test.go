package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oncegate/oncegate/internal/mock"
)

// metrics_listen serves /metrics with no key on its own address; the API
// port answers it to the admin key only.
func TestMetricsListen(t *testing.T) {
	w := newWorld(t, mock.Config{})
	w.prependConfig(t, "metrics_listen: 127.0.0.1:0\nadmin_key_env: ONCEGATE_E2E_ADMIN\n")
	g := w.start("ONCEGATE_E2E_ADMIN=" + adminKey)
	addr := g.stdout.wait(t, regexp.MustCompile(`oncegate metrics on (http://\S+)`), 10*time.Second)[1]
	get := func(url, key string) int { return getStatus(t, url, key) }
	if st := get(addr, ""); st != 200 {
		t.Fatalf("metrics_listen: %d", st)
	}
	if st := get(g.url+"/metrics", ""); st != 401 {
		t.Fatalf("the API port without a key: %d", st)
	}
	if st := get(g.url+"/metrics", apiKey); st != 401 {
		t.Fatalf("the API port with a tenant's key: %d", st)
	}
	if st := get(g.url+"/metrics", adminKey); st != 200 {
		t.Fatalf("the API port with the admin key: %d", st)
	}
}

// With telemetry.otlp_endpoint the binary exports its spans to an
// OTLP/HTTP collector, and flushes them when it stops: an in-process
// receiver decodes exactly one span for the logical request, in the
// caller's trace, and one child per attempt.
func TestTracesReachTheCollector(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer collector.Close()
	w := newWorld(t, mock.Config{})
	w.prependConfig(t, "telemetry: {otlp_endpoint: \""+collector.URL+"\"}\n")
	w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	g := w.start()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"model":"chat","messages":[{"role":"user","content":"trace me"}]}`
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("request: %v %v", res, err)
	}
	res.Body.Close()
	requestID := res.Header.Get("X-Oncegate-Request-Id")
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = g.cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	var request *tracepb.Span
	var attempts []*tracepb.Span
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.Name, "chat "):
			if request != nil {
				t.Fatal("two spans for one logical request")
			}
			request = s
		case strings.HasPrefix(s.Name, "attempt "):
			attempts = append(attempts, s)
		}
	}
	if request == nil || hex.EncodeToString(request.TraceId) != traceID {
		t.Fatalf("the request's span is missing or not in the caller's trace: %v", request)
	}
	found := false
	for _, kv := range request.Attributes {
		found = found || kv.Key == "oncegate.request_id" && kv.Value.GetStringValue() == requestID
	}
	if !found {
		t.Fatal("the request span does not name its request id")
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans for 2 attempts", len(attempts))
	}
	for _, a := range attempts {
		if string(a.ParentSpanId) != string(request.SpanId) || string(a.TraceId) != string(request.TraceId) {
			t.Fatalf("attempt span %s is not the request's child", a.Name)
		}
	}
}

// SIGHUP and oncegate reload swap the configuration without a restart,
// while 20 streams run: a new tenant, a second key for an old one
// (rotation); every stream finishes whole; the old key works until a
// reload removes it; an invalid file is refused with its position and the
// old configuration stays.
func TestReloadWithoutARestart(t *testing.T) {
	w := newWorld(t, mock.Config{Tokens: 40, TokenInterval: 50 * time.Millisecond})
	base := w.prependConfig(t, "admin_key_env: ONCEGATE_E2E_ADMIN\n")
	env := []string{"ONCEGATE_E2E_ADMIN=" + adminKey, "ONCEGATE_E2E_SECOND=sk-second-key", "ONCEGATE_E2E_NEW=sk-new-tenant"}
	g := w.start(env...)
	status := func(key string) int { return getStatus(t, g.url+"/v1/models", key) }
	if status("sk-second-key") != 401 || status("sk-new-tenant") != 401 || status(apiKey) != 200 {
		t.Fatal("the keys before the reload")
	}
	// 20 streams in flight across the reload.
	var streams sync.WaitGroup
	done := make(chan string, 20)
	for i := range 20 {
		streams.Add(1)
		go func() {
			defer streams.Done()
			content := "stream " + strconv.Itoa(i)
			body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"` + content + `"}]}`
			req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- err.Error()
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			var text strings.Builder
			for _, m := range regexp.MustCompile(`"content":"((?:[^"\\]|\\.)*)"`).FindAllSubmatch(b, -1) {
				var piece string
				_ = json.Unmarshal(append(append([]byte{'"'}, m[1]...), '"'), &piece)
				text.WriteString(piece)
			}
			if want := mock.AnswerFor(0, content, 40); text.String() != want || !strings.Contains(string(b), "[DONE]") {
				done <- fmt.Sprintf("stream %d read %q, want %q", i, text.String(), want)
				return
			}
			done <- ""
		}()
	}
	for w.mock.Stats().Requests < 20 {
		time.Sleep(10 * time.Millisecond)
	}
	grown := strings.Replace(base, "tenants: [{id: e2e, api_key_env: ONCEGATE_E2E_KEY}]",
		"tenants: [{id: e2e, api_key_env: ONCEGATE_E2E_KEY, api_key_envs: [ONCEGATE_E2E_SECOND]}, {id: new, api_key_env: ONCEGATE_E2E_NEW}]", 1)
	if grown == base {
		t.Fatal("the test's configuration changed shape")
	}
	if err := os.WriteFile(w.config, []byte(grown), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.stderr.wait(t, regexp.MustCompile(`configuration reloaded`), 10*time.Second)
	if status("sk-second-key") != 200 || status("sk-new-tenant") != 200 || status(apiKey) != 200 {
		t.Fatal("the keys after the reload")
	}
	streams.Wait()
	close(done)
	for msg := range done {
		if msg != "" {
			t.Fatal(msg)
		}
	}
	// An invalid file changes nothing, and says where it is wrong.
	if err := os.WriteFile(w.config, []byte(strings.Replace(grown, "max_attempts: 2,", "max_attempts: 0,", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	reload := exec.Command(binary, "reload", "--config", w.config, "--url", g.url)
	reload.Env = append(os.Environ(), append(env, "ONCEGATE_E2E_KEY="+apiKey)...)
	out, err := reload.CombinedOutput()
	if err == nil || !regexp.MustCompile(`oncegate\.yaml:\d+:\d+`).Match(out) {
		t.Fatalf("reload of an invalid file: %v\n%s", err, out)
	}
	if status("sk-new-tenant") != 200 {
		t.Fatal("a refused reload changed the configuration")
	}
	// oncegate reload of a valid file: the new tenant is gone again, and
	// the rotation ends — the second key is the tenant's only one.
	rotated := strings.Replace(base, "api_key_env: ONCEGATE_E2E_KEY}", "api_key_env: ONCEGATE_E2E_SECOND}", 1)
	if err := os.WriteFile(w.config, []byte(rotated), 0o644); err != nil {
		t.Fatal(err)
	}
	reload = exec.Command(binary, "reload", "--config", w.config, "--url", g.url)
	reload.Env = append(os.Environ(), append(env, "ONCEGATE_E2E_KEY="+apiKey)...)
	if out, err := reload.CombinedOutput(); err != nil || !strings.Contains(string(out), "reloaded") {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	if status("sk-new-tenant") != 401 || status(apiKey) != 401 || status("sk-second-key") != 200 {
		t.Fatal("the keys after the second reload")
	}
}

// prependConfig puts text before the world's configuration and returns
// the whole file.
func (w *world) prependConfig(t *testing.T, text string) string {
	t.Helper()
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	s := text + string(cfg)
	if err := os.WriteFile(w.config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// getStatus GETs url with a key ("" for none) and returns the status.
func getStatus(t *testing.T, url, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// Keys kept in files are read again on every reload, as a running
// process's environment cannot be: a reload picks up a new tenant whose
// key is in a file, and a changed file rotates the key — the old one is
// refused, the new one served. The admin key `oncegate reload` sends comes
// from a file too, and no key reaches the log.
func TestReloadReadsKeysFromFiles(t *testing.T) {
	w := newWorld(t, mock.Config{})
	dir := filepath.Dir(w.config)
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tenant.key", apiKey+"\n")
	write("admin.key", adminKey+"\n")
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	base := "admin_key_file: admin.key\n" + strings.Replace(string(cfg), "api_key_env: ONCEGATE_E2E_KEY", "api_key_file: tenant.key", 1)
	if err := os.WriteFile(w.config, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startServe(t, []string{"--config", w.config, "--store", w.store}, nil)
	status := func(key string) int { return getStatus(t, g.url+"/v1/models", key) }
	if status(apiKey) != 200 || status("sk-new-one") != 401 {
		t.Fatal("the keys before the reload")
	}
	reload := func() {
		t.Helper()
		out, err := exec.Command(binary, "reload", "--config", w.config, "--url", g.url).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "reloaded") {
			t.Fatalf("oncegate reload: %v\n%s", err, out)
		}
	}
	// A new tenant, its key in a file the process never saw.
	write("new.key", "sk-new-one\n")
	grown := strings.Replace(base, "tenants: [{id: e2e, api_key_file: tenant.key}]",
		"tenants: [{id: e2e, api_key_file: tenant.key}, {id: new, api_key_file: new.key}]", 1)
	if grown == base {
		t.Fatal("the test's configuration changed shape")
	}
	if err := os.WriteFile(w.config, []byte(grown), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.stderr.wait(t, regexp.MustCompile(`configuration reloaded`), 10*time.Second)
	if status("sk-new-one") != 200 || status(apiKey) != 200 {
		t.Fatal("the keys after the reload that added a tenant")
	}
	// The file changes: the key rotates on the next reload.
	write("new.key", "sk-new-two\n")
	if status("sk-new-one") != 200 {
		t.Fatal("a key changed before the reload")
	}
	reload()
	if status("sk-new-one") != 401 || status("sk-new-two") != 200 || status(apiKey) != 200 {
		t.Fatal("the keys after the file changed and the gateway reloaded")
	}
	g.stderr.mu.Lock()
	defer g.stderr.mu.Unlock()
	for _, line := range g.stderr.all {
		for _, key := range []string{apiKey, adminKey, "sk-new-one", "sk-new-two"} {
			if strings.Contains(line, key) {
				t.Fatalf("a key in the log: %s", line)
			}
		}
	}
}
