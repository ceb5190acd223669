package gw

import "testing"

// Cost prices cache reads and writes apart from the rest of the input;
// an unset cache price is the input price, and counts a provider
// over-reports are capped at the input.
func TestCostPricesTheCacheApart(t *testing.T) {
	usd := func(v float64) *float64 { return &v }
	plain := PriceFromPerMTok(3, 15)
	cached := plain.WithCachePrices(usd(0.3), usd(3.75))
	u := Usage{InputTokens: 1000, OutputTokens: 100, CachedTokens: 600, CacheWriteTokens: 300}
	tests := []struct {
		name  string
		price Price
		usage Usage
		want  NanoUSD
	}{
		{"no cache prices: all input at the input price", plain, u, 1000*3000 + 100*15000},
		{"cache prices", cached, u, 100*3000 + 600*300 + 300*3750 + 100*15000},
		{"only a read price", plain.WithCachePrices(usd(0.3), nil), u, 100*3000 + 600*300 + 300*3000 + 100*15000},
		{"no cache use", cached, Usage{InputTokens: 1000, OutputTokens: 100}, 1000*3000 + 100*15000},
		{"reads over the input are capped", cached, Usage{InputTokens: 10, CachedTokens: 50, CacheWriteTokens: 5}, 10 * 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.price.Cost(tc.usage); got != tc.want {
				t.Fatalf("cost %d, want %d", got, tc.want)
			}
		})
	}
	// The worst case prices the prompt at the dearest input price: a
	// cache write may cost more than plain input.
	if got, want := cached.WorstCase(1000, 100), NanoUSD(1000*3750+100*15000); got != want {
		t.Fatalf("worst case %d, want %d", got, want)
	}
	if got, want := plain.WorstCase(1000, 100), NanoUSD(1000*3000+100*15000); got != want {
		t.Fatalf("worst case without cache prices %d, want %d", got, want)
	}
}
