package receipt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// typical is the receipt of a request answered by its first attempt.
func typical() *Receipt {
	now := time.Date(2026, 12, 1, 22, 10, 0, 123456789, time.UTC)
	fb := now.Add(40 * time.Millisecond)
	return &Receipt{RequestID: "req_01JXYZABCDEF0123456789", Tenant: "acme", Operation: "chat.completions", Model: "chat",
		KeySHA256: "4f0b1c9e5d2a7b3c8e6f1a0d9c4b7e2f5a8d3c6b9e0f1a4d7c2b5e8f0a3d6c9b", RequestSHA256: "9c4b7e2f5a8d3c6b9e0f1a4d7c2b5e8f0a3d6c9b4f0b1c9e5d2a7b3c8e6f1a0d",
		PolicySHA256: "1a4d7c2b5e8f0a3d6c9b4f0b1c9e5d2a7b3c8e6f1a0d9c4b7e2f5a8d3c6b9e0f", RetryOwner: RetryOwner, CreatedAt: now, Deadline: now.Add(time.Minute),
		Request: Facts{EstimatedInputTokens: 12, MaxOutputTokens: 4096, MaxDataBoundary: "external", IneligibleRoutes: map[string]string{}},
		Attempts: []Attempt{{Ordinal: 1, Route: "primary", RouteOrdinal: 1, Provider: "openai", UpstreamModel: "gpt-4o-mini", Release: "2024-07-18",
			DataBoundary: "external", Purpose: "primary", RequestSHA256: "9c4b7e2f5a8d3c6b", NotBefore: now, StartedAt: now, FirstByteAt: &fb,
			ObservedAt: fb.Add(time.Millisecond), OutcomeClass: "success", Kind: "success", HTTPStatus: 200, VisibleOutput: true, EmittedTokens: 32,
			Usage: gw.Usage{InputTokens: 12, OutputTokens: 32}, CostUSD: 0.0000213, ReservedUSD: 0.0041, Breaker: BreakerState{State: "closed", Generation: 1}}},
		Decisions: []Decision{{AfterAttempt: 0, Action: "dispatch", Route: "primary", NotBefore: &now, ReserveUSD: 0.0041},
			{AfterAttempt: 1, Action: "finish", Terminal: "succeeded", Reason: "success"}},
		Terminal: "succeeded", Reason: "success", Totals: Totals{Attempts: 1, Providers: []string{"openai"}, BillableTokens: 44, CostUSD: 0.0000213},
		AttemptsSHA256: "0a3d6c9b4f0b1c9e5d2a7b3c8e6f1a0d9c4b7e2f5a8d3c6b9e0f1a4d7c2b5e8f"}
}

func BenchmarkMarshalReceiptEncodingJSON(b *testing.B) {
	r := typical()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal((*tagged)(r)); err != nil {
			b.Fatal(err)
		}
	}
}

// Receipts are read from files and the ledger: Parse never panics, and
// what it accepts seals, encodes canonically and parses back to the same
// digests.
func FuzzParseReceipt(f *testing.F) {
	r := typical()
	if err := r.Seal(); err != nil {
		f.Fatal(err)
	}
	b, err := r.Canonical()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"request_id":"x","attempts":[{"ordinal":1,"first_byte_at":null}],"decisions":[],"totals":{"providers":null}}`))
	f.Add([]byte(`{"request_id":"x","extra":1}`))
	f.Add([]byte(`{"created_at":"not a time"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		if err := r.Seal(); err != nil {
			return // e.g. a float the canonical form cannot hold
		}
		c, err := r.Canonical()
		if err != nil {
			t.Fatalf("a sealed receipt does not encode: %v", err)
		}
		back, err := Parse(c)
		if err != nil {
			t.Fatalf("its canonical form does not parse: %v\n%s", err, c)
		}
		if err := back.Seal(); err != nil || back.ReceiptSHA256 != r.ReceiptSHA256 || back.AttemptsSHA256 != r.AttemptsSHA256 {
			t.Fatalf("digests changed through the canonical form: %s / %s (%v)", r.ReceiptSHA256, back.ReceiptSHA256, err)
		}
	})
}
