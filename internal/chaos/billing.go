package chaos

import (
	"fmt"

	"github.com/oncegate/oncegate/internal/receipt"
)

// billedShown checks that no request was billed less output than it
// showed (docs/streaming.md, "What a broken stream is billed"): each
// attempt's billed output is at least the visible output the gateway
// relayed of it, and each streaming client's receipt bills, over all
// its attempts, at least the text pieces the client itself read — cut
// streams, resumed ones and replays alike.
func billedShown(receipts map[string]*receipt.Receipt, outcomes []outcome, example func(string, ...any)) Row {
	row := Row{Invariant: "billed output ≥ output shown"}
	attempts, clients, cut := 0, 0, 0
	for id, r := range receipts {
		for _, a := range r.Attempts {
			if a.EmittedTokens == 0 {
				continue
			}
			attempts++
			row.Checked++
			if a.Usage.OutputTokens < a.EmittedTokens {
				row.Violations++
				example("%s attempt %d (%s): billed %d output tokens, showed %d", id, a.Ordinal, a.Route, a.Usage.OutputTokens, a.EmittedTokens)
			}
		}
	}
	for i, o := range outcomes {
		r := receipts[o.requestID]
		if !o.stream || o.shown == 0 || r == nil {
			continue
		}
		clients++
		if !o.ok {
			cut++
		}
		row.Checked++
		var billed int64
		for _, a := range r.Attempts {
			billed += a.Usage.OutputTokens
		}
		if billed < o.shown {
			row.Violations++
			example("request %d (%s): the client read %d text pieces, its receipt %s bills %d output tokens", i, o.kind, o.shown, o.requestID, billed)
		}
	}
	row.Note = fmt.Sprintf("%d attempts that showed output; %d streaming clients that read output, %d of them cut short", attempts, clients, cut)
	return row
}
