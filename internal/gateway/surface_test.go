package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// Embeddings go through the same engine as chat: routes that cannot serve
// them are skipped, failures are retried, the receipt counts every call,
// and a keyed repeat is replayed.
func TestEmbeddingsThroughTheSDK(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		var h http.Header
		c := e.openai(&h)
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}))
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"first text", "second text"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 2 {
			t.Fatalf("%d embeddings for 2 inputs", len(res.Data))
		}
		for i, text := range []string{"first text", "second text"} {
			want := mock.Embedding(text, 8)
			for j, v := range res.Data[i].Embedding {
				if v != want[j] {
					t.Fatalf("embedding %d differs at %d: %v want %v", i, j, v, want[j])
				}
			}
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if r.Operation != "embeddings" || len(r.Attempts) != 2 || r.Attempts[1].Usage.InputTokens == 0 || r.Terminal != "succeeded" {
			t.Fatalf("receipt: %+v", r)
		}
		if _, why := r.Request.IneligibleRoutes["claude"]; !why {
			t.Fatalf("the anthropic route was not ruled out: %v", r.Request.IneligibleRoutes)
		}
		if calls := e.primary.Stats().Requests + e.fallback.Stats().Requests; calls != int64(len(r.Attempts)) || e.anthropic.Stats().Requests != 0 {
			t.Fatalf("%d upstream calls for %d attempts", calls, len(r.Attempts))
		}
		body := `{"model":"embed","input":"keyed"}`
		first, b1 := e.post("/v1/embeddings", body, map[string]string{"Idempotency-Key": "emb-1"})
		again, b2 := e.post("/v1/embeddings", body, map[string]string{"Idempotency-Key": "emb-1"})
		if first.StatusCode != 200 || string(b1) != string(b2) || again.Header.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("keyed repeat: %d %s / %s %v", first.StatusCode, b1, b2, again.Header)
		}
		if bad, b := e.post("/v1/embeddings", `{"model":"embed","input":[]}`, nil); bad.StatusCode != 400 {
			t.Fatalf("empty input: %d %s", bad.StatusCode, b)
		}
	})
}

func TestModelsAndTokenCounts(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		oc := e.openai(nil)
		m, err := oc.Models.Get(ctx, "chat")
		if err != nil || m.ID != "chat" || m.Object != "model" {
			t.Fatalf("openai model: %+v %v", m, err)
		}
		_, err = oc.Models.Get(ctx, "nope")
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 404 || oe.Code != api.CodeModelNotFound {
			t.Fatalf("unknown model: %v", err)
		}
		ac := e.anthropicClient(nil)
		am, err := ac.Models.Get(ctx, "claude", anthropic.ModelGetParams{})
		if err != nil || am.ID != "claude" || am.Type != "model" {
			t.Fatalf("anthropic model: %+v %v", am, err)
		}
		params := anthropic.MessageCountTokensParams{Model: "claude", Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this?"))}}
		var h http.Header
		ac = e.anthropicClient(&h)
		got, err := ac.Messages.CountTokens(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		ir, _ := provider.ParseCountTokens([]byte(`{"model":"claude","messages":[{"role":"user","content":[{"type":"text","text":"How many tokens is this?"}]}]}`))
		estimate := provider.PromptTokens(ir)
		if got.InputTokens != estimate+mock.CountOverhead || h.Get("X-Oncegate-Token-Count") != "provider" {
			t.Fatalf("the provider's count: %d (estimate %d), %v", got.InputTokens, estimate, h.Get("X-Oncegate-Token-Count"))
		}
		params.Model = "chat" // OpenAI routes: no provider count
		got, err = ac.Messages.CountTokens(ctx, params)
		if err != nil || got.InputTokens != estimate || h.Get("X-Oncegate-Token-Count") != "estimate" {
			t.Fatalf("the estimate: %d %v %v", got.InputTokens, err, h.Get("X-Oncegate-Token-Count"))
		}
		if res, b := e.post("/v1/nothing/here", `{}`, nil); res.StatusCode != 404 || errCodeOf(b) != api.CodeNotFound {
			t.Fatalf("unknown endpoint: %d %s", res.StatusCode, b)
		}
	})
}

func errCodeOf(b []byte) string {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return errCode(m)
}

// /metrics shows every tenant's spend: on the API port it answers the
// admin key only; with runtime and process collectors beside oncegate's.
func TestMetricsNeedTheAdminKey(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		for key, want := range map[string]int{"": 401, keyAcme: 401, "wrong": 401} {
			req, _ := http.NewRequest("GET", e.url+"/metrics", nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != want {
				t.Fatalf("/metrics with key %q: %d, want %d", key, res.StatusCode, want)
			}
		}
		body := string(e.metricsText())
		for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "oncegate_turn_ratio"} {
			if !strings.Contains(body, "\n"+name+" ") {
				t.Fatalf("/metrics lacks %s", name)
			}
		}
		h := e.gw.MetricsHandler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "oncegate_turn_ratio") {
			t.Fatalf("the metrics_listen handler: %d", rec.Code)
		}
	})
}

// Receipt lists are newest first, and page on with after.
func TestReceiptsNewestFirst(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		var ids []string
		for i := range 3 {
			res, _ := e.post("/v1/chat/completions", chatBody("chat", false)[:len(chatBody("chat", false))-1]+fmt.Sprintf(`,"user":"u%d"}`, i), nil)
			ids = append(ids, res.Header.Get("X-Oncegate-Request-Id"))
		}
		list := func(q string) []string {
			req, _ := http.NewRequest("GET", e.url+"/v1/receipts?"+q, nil)
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var page struct {
				Data []struct {
					RequestID string `json:"request_id"`
				}
			}
			_ = json.NewDecoder(res.Body).Decode(&page)
			var out []string
			for _, r := range page.Data {
				out = append(out, r.RequestID)
			}
			return out
		}
		if got := list("limit=2"); len(got) != 2 || got[0] != ids[2] || got[1] != ids[1] {
			t.Fatalf("first page %v, requests %v", got, ids)
		}
		if got := list("limit=2&after=" + ids[1]); len(got) != 1 || got[0] != ids[0] {
			t.Fatalf("next page %v, requests %v", got, ids)
		}
	})
}

// A drain makes the gateway not ready from its first moment, while the
// request in flight finishes.
func TestReadyzTurnsAtTheDrain(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{TTFT: 300 * time.Millisecond}}, func(t *testing.T, e *env) {
		ln, err := e.mem.Listen("drain.test:80")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.gw.Serve(ctx, ln) }()
		answered := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", "http://drain.test/v1/chat/completions", strings.NewReader(chatBody("chat", false)))
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			res, err := e.client.Do(req)
			if err != nil {
				answered <- 0
				return
			}
			res.Body.Close()
			answered <- res.StatusCode
		}()
		for e.primary.Stats().Requests == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		for !e.gw.draining.Load() {
			time.Sleep(time.Millisecond)
		}
		rec := httptest.NewRecorder()
		e.gw.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "draining") {
			t.Fatalf("/readyz during the drain: %d %s", rec.Code, rec.Body)
		}
		if st := <-answered; st != 200 {
			t.Fatalf("the request in flight got %d", st)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
