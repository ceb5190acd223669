package receipt

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
)

// The spend facts a receipt hands its store are, to the nano-dollar, the
// ones its JSON says (ledger.ReceiptFacts): whatever its costs, tokens,
// tags, names and creation time.
func TestPropertySpendFactsAreWhatTheJSONSays(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		usd := func(label string) float64 {
			// Costs as the price tables make them: nano-dollar steps, and
			// arbitrary floats too.
			if rapid.Bool().Draw(t, label+"_exact") {
				return gw.NanoUSD(rapid.Int64Range(0, 50_000_000_000).Draw(t, label)).USD()
			}
			return rapid.Float64Range(0, 50).Draw(t, label+"_float")
		}
		r := &Receipt{RequestID: "r1", Tenant: "acme", Model: rapid.StringMatching(`[a-z0-9-]{0,12}`).Draw(t, "model"),
			KeyID: rapid.StringMatching(`(vk_[a-z0-9]{6})?`).Draw(t, "key"), KeyName: rapid.String().Draw(t, "key_name"),
			User: rapid.String().Draw(t, "user"), Tags: rapid.SliceOfN(rapid.StringMatching(`[ -~]{1,8}`), 0, 4).Draw(t, "tags"),
			CreatedAt: time.Unix(0, rapid.Int64Range(1, math.MaxInt64/4).Draw(t, "created")).In(time.FixedZone("x", rapid.IntRange(-12, 12).Draw(t, "zone")*3600))}
		n := rapid.IntRange(0, 5).Draw(t, "attempts")
		for i := range n {
			r.Attempts = append(r.Attempts, Attempt{Ordinal: i + 1, Usage: gw.Usage{InputTokens: rapid.Int64Range(0, 1<<40).Draw(t, "in"),
				OutputTokens: rapid.Int64Range(0, 1<<40).Draw(t, "out")}, CostUSD: usd("cost"), OrphansCostUSD: usd("orphans")})
		}
		r.Totals = Totals{Attempts: n, CostUSD: usd("total")}
		body, err := r.JSON()
		if err != nil {
			t.Fatal(err)
		}
		want, ok := ledger.ReceiptFacts("acme", "r1", body)
		if !ok {
			t.Fatalf("the receipt's JSON has no facts: %s", body)
		}
		got := r.SpendFacts()
		got.RequestID, got.Tenant = "r1", "acme"
		if *got != *want {
			t.Fatalf("facts of the receipt %+v, of its JSON %+v", *got, *want)
		}
	})
	if (&Receipt{}).SpendFacts() != nil {
		t.Fatal("a receipt without a creation time has facts")
	}
}
