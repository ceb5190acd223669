package mock

import "unicode/utf8"

// The mock's count of a prompt (docs/mock.md, "How the fakes are built"):
// 3 per request, 4 per message, each text's characters ÷ 4 rounded up, 765
// per image or other non-text part. The gateway estimates by the same
// documented rule (internal/tokens); the mock writes the rule out rather
// than importing it, so that a receipt charged by estimate is checked
// against the rule, not against the very code that charged it.
const (
	perRequest = 3
	perMessage = 4
	perImage   = 765
)

// textTokens counts a text: one token per four characters (not bytes),
// rounded up.
func textTokens(s string) int64 { return int64((utf8.RuneCountInString(s) + 3) / 4) }
