package replica

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/receipt"
)

// A route one replica found cooling — a 429 with Retry-After: 20
// (docs/retries.md) — is skipped by the other replica's requests without
// an attempt: the second replica's request goes straight to the healthy
// route, its receipt shows the cooling it was decided under, and the
// mocks count one call on the cooling route in all. Driven by the
// official OpenAI SDK at its default settings, over real HTTP, with real
// Redis and PostgreSQL.
func TestACoolingOnOneReplicaIsSeenByTheOther(t *testing.T) {
	ctx := context.Background()
	redisURL, pgURL := redistest.URL(t), pgtest.URL(t)
	east, west := mock.New(mock.Config{Tokens: 2}), mock.New(mock.Config{Tokens: 2})
	eastSrv, westSrv := httptest.NewServer(east), httptest.NewServer(west)
	t.Cleanup(eastSrv.Close)
	t.Cleanup(westSrv.Close)
	t.Cleanup(east.Close)
	t.Cleanup(west.Close)
	east.SetScript(mock.Script{Rules: []mock.Rule{{FirstCalls: 1, Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "20"}}}})
	yaml := `tenants: [{id: acme, api_key_env: K}]
providers:
  - {id: pe, type: openai, base_url: "EAST/v1"}
  - {id: pw, type: openai, base_url: "WEST/v1"}
routes:
  - {id: east, provider: pe, model: m-east, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}, capabilities: {input: [text]}}
  - {id: west, provider: pw, model: m-west, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}, capabilities: {input: [text]}}
models:
  - {name: cool, routes: [[east, west]], retry: {max_attempts: 3, base_delay: 20ms, retry_after_cap: 5s, deadline: 30s}}
`
	yaml = strings.NewReplacer("EAST", eastSrv.URL, "WEST", westSrv.URL).Replace(yaml)
	a, b, pol := startPair(t, redisURL, pgURL, "cooling.yaml", yaml)
	ask := func(r replica, text string) *receipt.Receipt {
		t.Helper()
		var id string
		c := openai.NewClient(option.WithBaseURL(r.url+"/v1"), option.WithAPIKey("sk-acme"),
			option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				res, err := next(req)
				if err == nil {
					id = res.Header.Get("X-Oncegate-Request-Id")
				}
				return res, err
			}))
		if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "cool",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text + " " + t.Name())}}); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", r.url+"/v1/receipts/"+id, nil)
		req.Header.Set("Authorization", "Bearer sk-acme")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var rc receipt.Receipt
		if err := json.NewDecoder(res.Body).Decode(&rc); err != nil {
			t.Fatal(err)
		}
		if drifts := receipt.Verify(pol, &rc); len(drifts) != 0 {
			t.Fatalf("receipt %s does not verify: %v", id, drifts)
		}
		return &rc
	}

	ra := ask(a, "one")
	if len(ra.Attempts) != 2 || ra.Attempts[0].Route != "east" || ra.Attempts[1].Route != "west" {
		t.Fatalf("a's request: %+v", ra.Attempts)
	}
	// Redis keeps the cooling in whole milliseconds.
	until := ra.Attempts[0].ObservedAt.Add(20 * time.Second).Truncate(time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for !b.load.Cooling([]string{"east"})["east"].Equal(until) {
		if time.Now().After(deadline) {
			t.Fatalf("b never saw east cooling until %v: %v", until, b.load.Cooling([]string{"east"}))
		}
		time.Sleep(5 * time.Millisecond)
	}
	rb := ask(b, "two")
	if len(rb.Attempts) != 1 || rb.Attempts[0].Route != "west" || !rb.Decisions[0].Cooling["east"].Equal(until) {
		t.Fatalf("b's request: attempts %+v, start %+v", rb.Attempts, rb.Decisions[0])
	}
	if e, w := east.Requests(), west.Requests(); e != 1 || w != 2 {
		t.Fatalf("upstream calls: east %d, west %d; want 1 and 2", e, w)
	}
}
