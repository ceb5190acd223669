package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
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

// SIGHUP and oncegate reload swap the configuration without a restart: a
// new tenant, a second key for an old one (rotation); an invalid file is
// refused with its position and the old configuration stays.
func TestReloadWithoutARestart(t *testing.T) {
	w := newWorld(t, mock.Config{})
	orig, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	base := "admin_key_env: ONCEGATE_E2E_ADMIN\n" + string(orig)
	if err := os.WriteFile(w.config, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"ONCEGATE_E2E_ADMIN=" + adminKey, "ONCEGATE_E2E_SECOND=sk-second-key", "ONCEGATE_E2E_NEW=sk-new-tenant"}
	g := w.start(env...)
	status := func(key string) int {
		req, _ := http.NewRequest("GET", g.url+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if status("sk-second-key") != 401 || status("sk-new-tenant") != 401 || status(apiKey) != 200 {
		t.Fatal("the keys before the reload")
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
	// oncegate reload of a valid file: the tenant is gone again.
	if err := os.WriteFile(w.config, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	reload = exec.Command(binary, "reload", "--config", w.config, "--url", g.url)
	reload.Env = append(os.Environ(), append(env, "ONCEGATE_E2E_KEY="+apiKey)...)
	if out, err := reload.CombinedOutput(); err != nil || !strings.Contains(string(out), "reloaded") {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	if status("sk-new-tenant") != 401 || status(apiKey) != 200 {
		t.Fatal("the keys after the second reload")
	}
}
