package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// The binary writes its access lines itself, not through slog
// (docs/performance.md): each is still one JSON object per line with the
// fields docs/operations.md lists, for an answer and for a refusal.
func TestAccessLinesAreJSONFromTheBinary(t *testing.T) {
	w := newWorld(t, mock.Config{Tokens: 3})
	g := w.start()
	res, _, err := g.post(context.Background(), "access-1", "a line \"quoted\"\tand tabbed")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("post: %v %v", res, err)
	}
	id := res.Header.Get("X-Oncegate-Request-Id")
	line := g.stderr.wait(t, regexp.MustCompile(`^\{.*"msg":"request".*"request_id":"`+regexp.QuoteMeta(id)+`".*\}$`), 30*time.Second)[0]
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	for k, want := range map[string]any{"level": "INFO", "method": "POST", "path": "/v1/chat/completions", "status": 200.0,
		"model": "chat", "attempts": 1.0, "dedup": "miss", "terminal": "succeeded"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v in %s", k, got[k], want, line)
		}
	}
	for _, k := range []string{"time", "latency_ms", "tenant", "routes", "tokens", "cost_usd"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %s", k, line)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, got["time"].(string)); err != nil {
		t.Errorf("time: %v", err)
	}
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(`{"model":"chat","messages":[]}`))
	req.Header.Set("Authorization", "Bearer sk-not-\"a-key")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	line = g.stderr.wait(t, regexp.MustCompile(`^\{.*"msg":"request".*"status":401.*\}$`), 30*time.Second)[0]
	got = nil
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	if got["level"] != "WARN" || got["code"] != "unauthorized" || strings.Contains(line, "a-key") {
		t.Fatalf("a refusal's line: %s", line)
	}
}

// limits.gc_headroom_bytes reaches the collector: the start-up line
// says what is in force.
func TestTheCollectorsHeadroomIsASetting(t *testing.T) {
	w := newWorld(t, mock.Config{Tokens: 3})
	cfg, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.config, append(cfg, "limits: {gc_headroom_bytes: 16777216}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	g := w.start()
	g.stderr.wait(t, regexp.MustCompile(`"gogc":"adaptive \(400 while the live heap is small, 16 MiB of headroom\)"`), 30*time.Second)
}
