package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// Std strings and floats are what encoding/json writes.
func TestStdIsEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z<>&"\\\x00-\x1f\x7f\x{2028}\x{2029}]{0,12}`),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) })).Draw(t, "s")
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s, Std); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
		f := rapid.OneOf(rapid.Float64(), rapid.Float64Range(-1e-5, 1e-5),
			rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 1e21, 1e-7, 1e20, 123.456})).Draw(t, "f")
		want, _ = json.Marshal(f)
		if got, ok := AppendFloat(nil, f); !ok || !bytes.Equal(got, want) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", f, got, want)
		}
	})
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if b, ok := AppendFloat([]byte("x"), f); ok || string(b) != "x" {
			t.Errorf("AppendFloat(%v) = %q, %v", f, b, ok)
		}
	}
}

// Wire is Slog with U+2028 and U+2029 left alone, and what it writes
// reads back as the string it was given, when that is valid UTF-8.
func TestWireIsSlogWithLineSeparatorsAsTheyAre(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z<>&"\\\x00-\x1f\x7f\x{2028}\x{2029}]{0,12}`),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) })).Draw(t, "s")
		got := AppendString(nil, s, Wire)
		want := bytes.ReplaceAll(bytes.ReplaceAll(AppendString(nil, s, Slog), []byte(`\u2028`), []byte("\u2028")), []byte(`\u2029`), []byte("\u2029"))
		if !bytes.Equal(got, want) {
			t.Fatalf("Wire %q = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || utf8.ValidString(s) && back != s {
			t.Fatalf("%s reads back as %q (%v), want %q", got, back, err, s)
		}
	})
}
