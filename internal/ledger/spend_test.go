package ledger_test

import (
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// BenchmarkReceiptFacts is what deriving a receipt's spend facts adds to
// each write of a receipt (docs/spend.md): on the caller's goroutine,
// never the SQLite writer's.
func BenchmarkReceiptFacts(b *testing.B) {
	body := []byte(ledgertest.BenchReceipt)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := ledger.ReceiptFacts("acme", "r", body); !ok {
			b.Fatal("no facts")
		}
	}
}

func TestReceiptFactsOfABenchReceipt(t *testing.T) {
	f, ok := ledger.ReceiptFacts("acme", "r1", []byte(ledgertest.BenchReceipt))
	want := ledger.SpendFacts{RequestID: "r1", Tenant: "acme", Created: 1796040000000000000, KeyID: "key_0123456789abcdef", KeyName: "search-web",
		User: "ana@example.com", Model: "gpt-4o", Tags: "\x1fprod\x1feu\x1f", Attempts: 2, InputTokens: 414, OutputTokens: 114, Cost: 1087500}
	if !ok || *f != want {
		t.Fatalf("facts %+v, want %+v", f, want)
	}
	if got := ledger.SplitTags(f.Tags); len(got) != 2 || got[0] != "prod" || got[1] != "eu" {
		t.Fatalf("tags %q", got)
	}
}
