package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestASecondGatewayOnTheSameFileStopsBeforeItTouchesAnything: started by
// mistake on the running gateway's SQLite file, a second `oncegate serve`
// exits naming the holder — before recovery, which would have settled the
// first one's requests in flight as indeterminate.
func TestASecondGatewayOnTheSameFileStopsBeforeItTouchesAnything(t *testing.T) {
	w := newWorld(t, mock.Config{TTFT: time.Second})
	g := w.start()
	done := make(chan string, 1)
	go func() {
		res, body, err := g.post(context.Background(), "in-flight", "hello")
		if err != nil {
			done <- err.Error()
			return
		}
		done <- res.Status + " " + res.Header.Get("X-Oncegate-Dedup") + " " + string(body)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for w.mock.Stats().Requests == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the attempt never reached the mock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, binary, "serve", "--config", w.config, "--listen", "127.0.0.1:0", "--store", "sqlite://"+w.db)
	second.Env = append(os.Environ(), "ONCEGATE_E2E_KEY="+apiKey)
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another oncegate process") || !strings.Contains(string(out), "pid ") {
		t.Fatalf("the second gateway: %v\n%s", err, out)
	}
	if got := <-done; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, " miss ") {
		t.Fatalf("the first gateway's request in flight: %s", got)
	}
	res, _, err := g.post(context.Background(), "in-flight", "hello")
	if err != nil || res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "replayed" {
		t.Fatalf("the key afterwards: %v %v", res, err)
	}
}
