package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// A joiner on another replica whose own deadline is too short to wait
// for the owner (60 s) is refused with 409 and told to come back when the
// owner may well have finished — about as long again as it has run — not
// when the owner's deadline ends; following Retry-After it gets the
// answer soon after the owner's stream ends.
func TestARefusedJoinerOnAnotherReplicaIsToldWhenToComeBack(t *testing.T) {
	// About 4 s of stream from a 60 s deadline.
	f := newFleet(t, 2, mock.Config{Tokens: 40, TokenInterval: 100 * time.Millisecond}, "")
	body := chatJSON("chat", "A long answer, please", true, "")
	post := func(g *gateway, extra map[string]string) *http.Response {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", g.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", "long-answer")
		for k, v := range extra {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	sent := time.Now()
	owner := post(f.gws[0], nil)
	defer owner.Body.Close()
	ownerBody := bufio.NewReader(owner.Body)
	if _, err := ownerBody.ReadString('\n'); owner.StatusCode != 200 || err != nil {
		t.Fatalf("the owner's stream: %d %v", owner.StatusCode, err)
	}
	ownerDone := make(chan time.Time, 1)
	go func() { _, _ = io.Copy(io.Discard, ownerBody); ownerDone <- time.Now() }()

	joiner := map[string]string{"X-Oncegate-Timeout-Ms": "500"}
	for tries := 0; ; tries++ {
		res := post(f.gws[1], joiner)
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			if res.Header.Get("X-Oncegate-Dedup") != "replayed" || !strings.Contains(string(got), "data: [DONE]") {
				t.Fatalf("the joiner's answer: %v %s", res.Header, got)
			}
			break
		}
		ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
		ran := time.Since(sent)
		if res.StatusCode != 409 || err != nil || !strings.Contains(string(got), "idempotency_key_in_use") || tries > 10 {
			t.Fatalf("try %d: %d %v %s", tries, res.StatusCode, res.Header, got)
		}
		// Not the owner's 60 s deadline: about as long again as it ran.
		if ra < 1 || time.Duration(ra)*time.Second > ran+2*time.Second {
			t.Fatalf("Retry-After %d s when the owner had run at most %v", ra, ran)
		}
		time.Sleep(time.Duration(ra) * time.Second)
	}
	finished := <-ownerDone
	if back := time.Since(sent); back > 2*finished.Sub(sent)+2*time.Second {
		t.Fatalf("the joiner had its answer %v after the owner started; the owner finished after %v", back, finished.Sub(sent))
	}
	if n := f.primary.Stats().Requests; n != 1 {
		t.Fatalf("%d upstream calls", n)
	}
}
