package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gatedUpstream is an OpenAI-protocol provider whose every stream sends
// its first words, then waits for release before it finishes: a slow
// request whose end the test decides.
func gatedUpstream(t *testing.T, started chan<- struct{}, release <-chan struct{}) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"mock-model","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
			w.(http.Flusher).Flush()
		}
		chunk(`{"role":"assistant","content":""}`, "null")
		chunk(`{"content":"Hello"}`, "null")
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		chunk(`{"content":" world"}`, "null")
		chunk(`{}`, `"stop"`)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A graceful stop keeps answering health probes until the drain ends: with
// a slow stream in flight after SIGTERM, /readyz says 503 draining and
// /healthz 200 (a load balancer's probes reach the process, rather than a
// closed port), a new request is refused with 503 draining and
// x-should-retry: true, the stream finishes whole, and then the process
// exits 0 and its port closes.
func TestDrainAnswersProbesUntilTheLastRequestFinishes(t *testing.T) {
	readSources("../..")
	started, release := make(chan struct{}, 1), make(chan struct{})
	up := gatedUpstream(t, started, release)
	dir := t.TempDir()
	config := filepath.Join(dir, "oncegate.yaml")
	if err := os.WriteFile(config, []byte(strings.ReplaceAll(configTemplate, "MOCK", up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startServe(t, []string{"--config", config, "--store", "sqlite://" + filepath.Join(dir, "ledger.db")},
		[]string{"ONCEGATE_E2E_KEY=" + apiKey})

	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"chat","stream":true,"messages":[{"role":"user","content":"slow"}]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the slow stream: %v %v", res, err)
	}
	defer res.Body.Close()
	<-started
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	g.stderr.wait(t, regexp.MustCompile(`"msg":"draining"`), 10*time.Second)

	probe := func(method, path, body string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s during the drain: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	for range 20 {
		if st, _, body := probe("GET", "/readyz", ""); st != 503 || body != "draining\n" {
			t.Fatalf("/readyz during the drain: %d %q", st, body)
		}
		if st, _, _ := probe("GET", "/healthz", ""); st != 200 {
			t.Fatalf("/healthz during the drain: %d", st)
		}
	}
	st, h, body := probe("POST", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"late"}]}`)
	if st != 503 || !strings.Contains(body, `"code":"draining"`) || h.Get("x-should-retry") != "true" {
		t.Fatalf("a new request during the drain: %d %v %s", st, h, body)
	}

	close(release)
	stream, err := io.ReadAll(res.Body)
	if err != nil || !strings.Contains(string(stream), `" world"`) || !strings.HasSuffix(string(stream), "data: [DONE]\n\n") {
		t.Fatalf("the stream in flight was cut: %v\n%s", err, stream)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("the gateway's exit after the drain: %v", err)
	}
	if res, err := http.Get(g.url + "/healthz"); err == nil {
		res.Body.Close()
		t.Fatal("the port still answers after the drain ended")
	}
}
