package ledger

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestEventPayloadsAreEncodingJSONs holds the payloads that write their
// own JSON to the bytes encoding/json writes for them: a stored event
// reads the same whichever wrote it.
func TestEventPayloadsAreEncodingJSONs(t *testing.T) {
	text := rapid.OneOf(rapid.String(), rapid.StringOf(rapid.RuneFrom([]rune("<>&\"\\\u2028\u2029\x00\x1f\u00e9\U0001F600 aZ"))),
		rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")) }))
	check := func(t *rapid.T, v selfEncoding) {
		want, wantErr := json.Marshal(v)
		got, ok := v.AppendJSON(nil)
		if wantErr != nil {
			if ok {
				t.Fatalf("%#v: encoding/json refuses it (%v), appendJSON wrote %s", v, wantErr, got)
			}
			return
		}
		if !ok {
			if string(Payload(v)) != string(want) {
				t.Fatalf("%#v: payload %s, encoding/json %s", v, Payload(v), want)
			}
			return
		}
		if string(got) != string(want) {
			t.Fatalf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		zone := time.FixedZone("z", rapid.IntRange(-26*3600, 26*3600).Draw(t, "offset"))
		at := time.Unix(rapid.Int64Range(-70000000000, 300000000000).Draw(t, "unix"), rapid.Int64Range(0, 999999999).Draw(t, "nanos")).In(zone)
		usd := rapid.OneOf(rapid.Float64(), rapid.Float64Range(0, 100),
			rapid.SampledFrom([]float64{0, 1e-7, 1e21, 1e20, math.NaN(), math.Inf(1), math.Copysign(0, -1), 0.000001})).Draw(t, "usd")
		check(t, Dispatch{Ordinal: rapid.Int().Draw(t, "ordinal"), Route: text.Draw(t, "route"), Purpose: text.Draw(t, "purpose"),
			NotBefore: at, ReserveUSD: usd})
		check(t, ReceiptRef{InReceipt: rapid.Bool().Draw(t, "in"), Ordinal: rapid.IntRange(-2, 3).Draw(t, "o"),
			AfterAttempt: rapid.IntRange(-2, 3).Draw(t, "a")})
		check(t, TerminalEvent{Terminal: text.Draw(t, "terminal"), Reason: text.Draw(t, "reason")})
	})
}

// BenchmarkEventPayloads is what a request's small event payloads cost:
// two dispatch events (one encoding), two references, a terminal.
func BenchmarkEventPayloads(b *testing.B) {
	de := Dispatch{Ordinal: 1, Route: "openai-primary", Purpose: "initial", NotBefore: time.Now().UTC(), ReserveUSD: 0.0123}
	b.ReportAllocs()
	for b.Loop() {
		_ = Payload(de)
		_ = Payload(ReceiptRef{InReceipt: true, Ordinal: 1})
		_ = Payload(ReceiptRef{InReceipt: true, AfterAttempt: 1})
		_ = Payload(TerminalEvent{Terminal: "succeeded", Reason: "completed"})
	}
}
