package replica

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/mock"
)

// A tenant's month and another's lifetime are shared by the replicas:
// what one gateway spent counts on the other, which refuses the next
// request (429 tenant_budget_exceeded; Retry-After for the month, none
// for the lifetime) without calling the provider.
func TestMonthAndLifetimeSpendIsSharedByReplicas(t *testing.T) {
	redisURL, pgURL := redistest.URL(t), pgtest.URL(t)
	m := mock.New(mock.Config{Tokens: 24})
	t.Cleanup(m.Close)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	yaml := `tenants:
  - {id: acme, api_key_env: K, budget: {cost_usd_per_month: 0.0005}}
  - {id: beta, api_key_env: KB, budget: {cost_usd_total: 0.0005}}
providers:
  - {id: p, type: openai, base_url: "UP/v1"}
routes:
  - {id: r, provider: p, model: m, behavior_class: c, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}, capabilities: {input: [text], max_output_tokens: 100}}
models:
  - {name: chat, routes: [r], retry: {max_attempts: 1, deadline: 30s}}
`
	a, b, _ := startPair(t, redisURL, pgURL, "spans.yaml", strings.ReplaceAll(yaml, "UP", srv.URL))
	post := func(r replica, key string, i int) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"spend `+strconv.Itoa(i)+` of `+key+`"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body.Error.Code + ": " + body.Error.Message, res.Header
	}
	for _, c := range []struct {
		key, period string
		retryAfter  bool
	}{{"sk-acme", "monthly", true}, {"sk-kb", "lifetime", false}} {
		served := 0
		for i := 0; ; i++ {
			st, msg, _ := post(a, c.key, i)
			if st == 429 && strings.HasPrefix(msg, "tenant_budget_pending") && strings.Contains(msg, c.period) {
				continue // the last settlement had not reached Redis yet: retry, as an SDK does
			}
			if st == 429 {
				if !strings.HasPrefix(msg, "tenant_budget_exceeded") || !strings.Contains(msg, c.period) {
					t.Fatalf("%s refused for another reason: %s", c.key, msg)
				}
				break
			}
			if st != 200 || i > 200 {
				t.Fatalf("%s request %d on a: %d %s", c.key, i, st, msg)
			}
			served++
		}
		calls := m.Requests()
		st, msg, h := post(b, c.key, 1000)
		if st != 429 || !strings.HasPrefix(msg, "tenant_budget_exceeded") || !strings.Contains(msg, c.period) ||
			(h.Get("Retry-After") != "") != c.retryAfter || h.Get("x-should-retry") != "false" {
			t.Fatalf("%s on b after %d served on a: %d %s, Retry-After %q", c.key, served, st, msg, h.Get("Retry-After"))
		}
		if served == 0 || m.Requests() != calls {
			t.Fatalf("%s: a served %d; b sent %d more calls", c.key, served, m.Requests()-calls)
		}
	}
}
