package gateway

import (
	"math"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// A route's cache prices charge the input tokens an answer read from (or
// wrote to) the provider's prompt cache, in both protocols and in streams:
// the receipt's cost, and what the tenant's daily spend is charged, are
// the usage at those prices — and the receipt still verifies.
func TestCachedTokensCostTheCachePrices(t *testing.T) {
	t.Parallel()
	const reads, writes = 40, 10
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5, CachedTokens: reads, CacheWriteTokens: writes}}, func(t *testing.T, e *env) {
		prompt := strings.Repeat("a long system prompt worth caching ", 20)
		body := func(model string, stream bool) string {
			s := "false"
			if stream {
				s = "true"
			}
			return `{"model":"` + model + `","max_tokens":50,"stream":` + s + `,"messages":[{"role":"user","content":"` + prompt + `"}]}`
		}
		tests := []struct {
			name, path, model string
			stream            bool
			// the route's prices, USD per million tokens: input, cache
			// read, cache write, output
			in, read, write, out float64
			// writes: the cache writes the route's protocol reports
			writes int64
		}{
			{"openai", "/v1/chat/completions", "cached-openai", false, 1, 0.5, 1, 2, 0},
			{"openai stream", "/v1/chat/completions", "cached-openai", true, 1, 0.5, 1, 2, 0},
			{"anthropic", "/v1/messages", "cached-claude", false, 3, 0.3, 3.75, 15, writes},
			{"anthropic stream", "/v1/messages", "cached-claude", true, 3, 0.3, 3.75, 15, writes},
			{"openai client on an anthropic route", "/v1/chat/completions", "cached-claude", true, 3, 0.3, 3.75, 15, writes},
		}
		for _, tc := range tests {
			before, _ := e.gw.tenants.Allowance("spender")
			res, b := e.postKey(keySpender, tc.path, body(tc.model, tc.stream), map[string]string{"X-Oncegate-Join": "off"})
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d %s", tc.name, res.StatusCode, b)
			}
			r := e.receiptAs(keySpender, res.Header.Get("X-Oncegate-Request-Id"))
			u := r.Attempts[0].Usage
			if u.CachedTokens != reads || u.CacheWriteTokens != tc.writes || u.InputTokens <= reads+writes || u.OutputTokens == 0 {
				t.Fatalf("%s: usage %+v", tc.name, u)
			}
			plain := u.InputTokens - u.CachedTokens - u.CacheWriteTokens
			want := (float64(plain)*tc.in + float64(u.CachedTokens)*tc.read + float64(u.CacheWriteTokens)*tc.write + float64(u.OutputTokens)*tc.out) / 1e6
			if math.Abs(r.Attempts[0].CostUSD-want) > 1e-9 || math.Abs(r.Totals.CostUSD-want) > 1e-9 {
				t.Fatalf("%s: cost %v (total %v), want %v for %+v", tc.name, r.Attempts[0].CostUSD, r.Totals.CostUSD, want, u)
			}
			after, _ := e.gw.tenants.Allowance("spender")
			if charged := before - after; charged != gw.NanoFromUSD(want) {
				t.Fatalf("%s: the tenant was charged %v, the receipt says %v", tc.name, charged.USD(), want)
			}
		}
	})
}
