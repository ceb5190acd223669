package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// metrics_listen serves /metrics with no key on its own address; the API
// port answers it to the admin key only.
func TestMetricsListen(t *testing.T) {
	w := newWorld(t, mock.Config{})
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	s := "metrics_listen: 127.0.0.1:0\nadmin_key_env: ONCEGATE_E2E_ADMIN\n" + string(cfg)
	if err := os.WriteFile(w.config, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start("ONCEGATE_E2E_ADMIN=" + adminKey)
	addr := g.stdout.wait(t, regexp.MustCompile(`oncegate metrics on (http://\S+)`), 10*time.Second)[1]
	get := func(url, key string) int {
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
// OTLP/HTTP collector, and flushes them when it stops.
func TestTracesReachTheCollector(t *testing.T) {
	var mu sync.Mutex
	var posts, bytes int
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == "POST" && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			mu.Lock()
			posts++
			bytes += len(b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	w := newWorld(t, mock.Config{})
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.config, []byte("telemetry: {otlp_endpoint: \""+collector.URL+"\"}\n"+string(cfg)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start()
	res, _, err := g.post(context.Background(), "", "trace me")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("request: %v %v", res, err)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = g.cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if posts == 0 || bytes == 0 {
		t.Fatalf("the collector got %d posts (%d bytes)", posts, bytes)
	}
}
