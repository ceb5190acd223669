package receipt

import (
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
)

// SpendFacts are the spend facts (docs/spend.md) of r as its JSON says
// them — ledger.ReceiptFacts of r.JSON(), to the nano-dollar — taken from
// the receipt itself, so that the gateway hands them to the store with
// the receipt and the store need not decode it. The request id and the
// tenant are the store's to set. Nil for a receipt without a creation
// time, which has none.
func (r *Receipt) SpendFacts() *ledger.SpendFacts {
	if r.CreatedAt.IsZero() {
		return nil
	}
	f := &ledger.SpendFacts{Created: ledger.UnixNano(r.CreatedAt), KeyID: r.KeyID, KeyName: r.KeyName, User: r.User,
		Model: r.Model, Tags: ledger.TagSet(r.Tags), Attempts: int64(r.Totals.Attempts), Cost: int64(gw.NanoFromUSD(r.Totals.CostUSD))}
	for i := range r.Attempts {
		a := &r.Attempts[i]
		f.InputTokens += a.Usage.InputTokens
		f.OutputTokens += a.Usage.OutputTokens
		f.Orphans += int64(gw.NanoFromUSD(a.OrphansCostUSD))
	}
	return f
}
