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

// A route that names a model of the catalogue and states no price bills
// at the catalogue's price (gpt-4o-mini: $0.15 in, $0.60 out, $0.075
// cached) and takes its context window and output limit; a stated price
// and output limit win. The tenant's day is charged the same.
func TestTheCataloguePricesARouteWithoutAPrice(t *testing.T) {
	t.Parallel()
	const reads = 30
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5, CachedTokens: reads}}, func(t *testing.T, e *env) {
		if r := e.pol.Route("catalogued"); r.Caps.MaxContextTokens != 128000 || r.Caps.MaxOutputTokens != 16384 {
			t.Fatalf("catalogued route's capabilities %+v", r.Caps)
		}
		if r := e.pol.Route("catalogued-override"); r.Caps.MaxOutputTokens != 500 || r.Caps.MaxContextTokens != 128000 {
			t.Fatalf("the override's capabilities %+v", r.Caps)
		}
		prompt := strings.Repeat("a prompt long enough to be cached ", 10)
		for _, tc := range []struct {
			model           string
			in, cached, out float64
		}{
			{"catalogued", 0.15, 0.075, 0.6},
			{"catalogued-override", 0.2, 0.2, 0.8}, // a stated price without a cache price: cached input at the input price
		} {
			before, _ := e.gw.tenants.Allowance("spender")
			res, b := e.postKey(keySpender, "/v1/chat/completions", `{"model":"`+tc.model+`","max_tokens":50,"messages":[{"role":"user","content":"`+prompt+`"}]}`, nil)
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d %s", tc.model, res.StatusCode, b)
			}
			r := e.receiptAs(keySpender, res.Header.Get("X-Oncegate-Request-Id"))
			u := r.Attempts[0].Usage
			if u.CachedTokens != reads || u.OutputTokens == 0 {
				t.Fatalf("%s: usage %+v", tc.model, u)
			}
			want := (float64(u.InputTokens-u.CachedTokens)*tc.in + float64(u.CachedTokens)*tc.cached + float64(u.OutputTokens)*tc.out) / 1e6
			if math.Abs(r.Totals.CostUSD-want) > 1e-9 {
				t.Fatalf("%s: cost %v, want %v for %+v", tc.model, r.Totals.CostUSD, want, u)
			}
			after, _ := e.gw.tenants.Allowance("spender")
			if charged := before - after; charged != gw.NanoFromUSD(want) {
				t.Fatalf("%s: the day was charged %v, want %v", tc.model, charged.USD(), want)
			}
		}
	})
}
