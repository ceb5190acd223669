package sqlite

import (
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
)

// A finish record carries the spend facts its writer gave, and reads
// back with them; one without reads back without (its receipt is then
// decoded when applied), and a record cut inside the facts does not
// decode.
func TestAFinishRecordCarriesItsSpendFacts(t *testing.T) {
	for _, facts := range []*ledger.SpendFacts{
		nil,
		{Created: 1_790_000_000_000_000_123, KeyID: "vk_1", KeyName: "web", User: "ü-1", Model: "chat", Tags: ledger.TagSet([]string{"prod", "a b"}),
			Attempts: 3, InputTokens: 1 << 40, OutputTokens: 7, Cost: -1, Orphans: 123_456_789},
	} {
		f := logFinish("r1", 2, 3)
		f.Facts = facts
		b := encodeFinish(f, nil)
		setLSN(b, 9)
		lr, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("facts %v: %v", facts, err)
		}
		switch got := lr.fin.Facts; {
		case facts == nil && got != nil:
			t.Fatalf("a finish without facts read back with %+v", got)
		case facts != nil && (got == nil || *got != *facts):
			t.Fatalf("facts %+v read back as %+v", facts, got)
		}
		if facts != nil {
			if _, err := decodeRecord(b[:len(b)-3]); err == nil {
				t.Fatal("a record cut inside its facts decoded")
			}
			if args := lr.factArgs(); args[0] != "r1" || args[1] != "acme" || args[6] != "chat" {
				t.Fatalf("the applier's facts: %v", args)
			}
		}
	}
}
