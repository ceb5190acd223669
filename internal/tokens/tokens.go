// Package tokens estimates token counts without a model's tokenizer. The
// gateway uses it to reserve worst-case cost before dispatch and to charge
// an attempt whose provider reported no usage (a stream cut before its
// usage event). The mock provider counts prompts by the same rule
// (docs/mock.md), written out in its own code rather than calling this
// one, so that a receipt and the mock's own counter agree exactly and a
// change to this rule shows up as a disagreement in the tests.
package tokens

import "unicode/utf8"

// Per-message and per-request overheads, as OpenAI documents for its
// chat format (role and separator tokens, and the reply primer).
const (
	PerMessage = 4
	PerRequest = 3
	// PerImage approximates one image at high detail (OpenAI: 85 + 170 × 4 tiles).
	PerImage = 765
)

// Text estimates the tokens of s: one per four characters, rounded up.
func Text(s string) int64 {
	n := utf8.RuneCountInString(s)
	return int64((n + 3) / 4)
}
