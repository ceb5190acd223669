package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/procstart"
)

// config is the example's gateway: the mock provider at MOCK as the one
// route of model chat (the example's default), three attempts at most.
const config = `
admin_key_env: EXAMPLE_ADMIN_KEY
store: sqlite://LEDGER
tenants: [{id: summarizer, api_key_env: SERVICE_KEY}]
providers: [{id: openai, type: openai, base_url: "MOCK/v1", api_key_env: OPENAI_API_KEY}]
routes:
  - {id: gpt, provider: openai, model: gpt-4o, behavior_class: c, data_boundary: external, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 128000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
models: [{name: chat, routes: [gpt], retry: {max_attempts: 3, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}]
`

// The example as a user runs it: built with go build, started with its
// environment, asked over HTTP. Its /summarize answers with the model's
// text and the receipt's path; the receipt, read from the gateway's API
// it serves beside, lists the three attempts the provider saw (two 503s,
// then the answer); a re-POST with the same Idempotency-Key gets the same
// receipt and no new call; SIGTERM stops it cleanly.
func TestTheExampleServiceAnswersWithItsReceipt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "embedded")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m := mock.New(mock.Config{Tokens: 7})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gpt-4o", FirstCalls: 2, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	provider := httptest.NewServer(m)
	defer provider.Close()
	cfg := filepath.Join(dir, "oncegate.yaml")
	conf := strings.NewReplacer("MOCK", provider.URL, "LEDGER", filepath.Join(dir, "ledger.db")).Replace(config)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ONCEGATE_CONFIG="+cfg, "SERVICE_KEY=sk-summarizer", "EXAMPLE_ADMIN_KEY=sk-admin",
		"OPENAI_API_KEY=sk-provider", "ADDR=127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	url, err := procstart.Listening(cmd, time.Minute)
	if err != nil {
		t.Fatalf("the example did not start: %v\n%s", err, stderr.String())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	summarize := func(key string) (summary, receipt string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/summarize", strings.NewReader(`{"text": "A long text to summarize."}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct{ Summary, Receipt string }
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || json.Unmarshal(b, &out) != nil || out.Summary == "" || !strings.HasPrefix(out.Receipt, "/v1/receipts/") {
			t.Fatalf("/summarize: %d %s\n%s", res.StatusCode, b, stderr.String())
		}
		return out.Summary, out.Receipt
	}
	attempts := func(path string) (statuses []int) {
		t.Helper()
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer sk-admin")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var rc struct {
			Attempts []struct {
				HTTPStatus int `json:"http_status"`
			} `json:"attempts"`
			Terminal string `json:"terminal"`
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || json.Unmarshal(b, &rc) != nil || rc.Terminal != "succeeded" {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		for _, a := range rc.Attempts {
			statuses = append(statuses, a.HTTPStatus)
		}
		return statuses
	}

	summary, receipt := summarize("order-7")
	id := strings.TrimPrefix(receipt, "/v1/receipts/")
	if got := attempts(receipt); len(got) != 3 || got[0] != 503 || got[1] != 503 || got[2] != 200 {
		t.Fatalf("the receipt's attempts: %v, want [503 503 200]", got)
	}
	if calls := m.Stats().ByRequestID[id].Requests; calls != 3 {
		t.Fatalf("the provider saw %d calls of %s, want the receipt's 3", calls, id)
	}
	again, receipt2 := summarize("order-7")
	if receipt2 != receipt || again != summary || m.Stats().Requests != 3 {
		t.Fatalf("a re-POST with the same key: %s %q, the provider saw %d calls in all; want %s, the same answer, 3",
			receipt2, again, m.Stats().Requests, receipt)
	}
	// A request without a key is a request of its own.
	if _, other := summarize(""); other == receipt || len(attempts(other)) != 1 {
		t.Fatalf("a request without a key: %s", other)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the deferred wait
		if err != nil {
			t.Fatalf("the example stopped with %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("the example did not stop within a minute of SIGTERM\n%s", stderr.String())
	}
}
