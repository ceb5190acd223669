package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		// RFC 8785 §3.2.2 / appendix examples.
		{"rfc8785 example", `{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
		  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"key order by UTF-16 units", `{"\u20ac":1,"\r":2,"\ud83d\ude00":3,"1":4,"\u0080":5,"\u00f6":6,"\ufb33":7}`,
			`{"\r":2,"1":4,"` + "\u0080" + `":5,"ö":6,"€":1,"😀":3,"` + "\ufb33" + `":7}`},
		{"whitespace and key order do not matter", "{ \"b\" : [ 1 , 2 ] ,\n\t\"a\" : { \"y\":1, \"x\":2 } }", `{"a":{"x":2,"y":1},"b":[1,2]}`},
		{"negative zero", `[-0, 0.0, -0.0]`, `[0,0,0]`},
		{"integers", `[1, 100, 1e2, 12345678901234567]`, `[1,100,100,12345678901234568]`},
		{"small and large", `[1e-6, 1e-7, 1e21, 1e20, 123e-20]`, `[0.000001,1e-7,1e+21,100000000000000000000,1.23e-18]`},
		{"empty containers", `{"a":[],"b":{}}`, `{"a":[],"b":{}}`},
		{"html characters stay literal", `"<a href='x'>&</a>"`, `"<a href='x'>&</a>"`},
		{"line separators stay literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"control characters", `"\u0000\u0008\u001f\t"`, `"\u0000\b\u001f\t"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate key":       `{"a":1,"a":2}`,
		"trailing data":       `{} {}`,
		"invalid JSON":        `{"a":}`,
		"invalid UTF-8":       "\"\xff\"",
		"lone high surrogate": `"x\ud800"`,
		"lone low surrogate":  `"x\udfff"`,
		"reversed pair":       `"\udc00\ud800"`,
		"surrogate in a key":  `{"\ud800":1}`,
		"number too big":      `1e400`,
		"empty":               ``,
		"too deep":            string(bytes.Repeat([]byte("["), 600)) + string(bytes.Repeat([]byte("]"), 600)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Canonicalize([]byte(in)); !errors.Is(err, ErrNotCanonicalizable) {
				t.Fatalf("got %v, want ErrNotCanonicalizable", err)
			}
		})
	}
}

func TestFormatES6(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1", 0.1: "0.1", 1.5e300: "1.5e+300", 5e-324: "5e-324", math.MaxFloat64: "1.7976931348623157e+308",
		-1e-7: "-1e-7", 9007199254740992: "9007199254740992", 295147905179352830000: "295147905179352830000",
	} {
		if got := FormatES6(f); got != want {
			t.Errorf("FormatES6(%v) = %s, want %s", f, got, want)
		}
	}
}

// FuzzCanonicalize: any input either fails cleanly or canonicalizes to a
// fixed point that is valid JSON meaning the same thing.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `[1e30,-0,0.5]`, `"\u00e9"`, `{"a":{"a":{}}}`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			return
		}
		again, err := Canonicalize(out)
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("not a fixed point: %q → %q → %q (%v)", in, out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil {
			t.Fatalf("canonical form of valid input is not valid JSON: %q", out)
		}
	})
}

// FuzzCanonicalizeMatchesReference: the fast canonicalizer agrees with the
// straightforward Token-based reference on every input, accepted or not.
func FuzzCanonicalizeMatchesReference(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `[1e30,-0,0.5,12345678901234567,-0.0]`, `"\u00e9\ud83d\ude00\/"`,
		`{"a":{"a":{}}}`, `{"a":1,"a":2}`, `{"\u20ac":1,"\r":2,"\ud83d\ude00":3,"\ufb33":4}`, `"\ud800"`, `01`, `[1.]`, `{"a" :1 , "b":[ ] }`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fast, ferr := Canonicalize(in)
		ref, rerr := refCanonicalize(in)
		if (ferr == nil) != (rerr == nil) {
			t.Fatalf("%q: fast error %v, reference error %v", in, ferr, rerr)
		}
		if ferr == nil && !bytes.Equal(fast, ref) {
			t.Fatalf("%q:\nfast      %s\nreference %s", in, fast, ref)
		}
	})
}

func BenchmarkCanonicalize(b *testing.B) {
	doc := []byte(`{"request_id":"01944f3e","attempts":[{"ordinal":1,"route":"primary","usage":{"input_tokens":3100,"output_tokens":600},"cost_usd":0.01375,"kind":"ok","started_at":"2026-01-01T00:00:00Z"},{"ordinal":2,"route":"fallback","usage":{"input_tokens":3100,"output_tokens":0},"cost_usd":0,"kind":"rate_limited","started_at":"2026-01-01T00:00:01.1Z"}],"tenant":"acme","model":"chat","terminal":"succeeded","totals":{"attempts":2,"providers":["a","b"],"billable_tokens":3700,"cost_usd":0.01375}}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Canonicalize(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalizeReference(b *testing.B) {
	doc := []byte(`{"request_id":"01944f3e","attempts":[{"ordinal":1,"route":"primary","usage":{"input_tokens":3100,"output_tokens":600},"cost_usd":0.01375,"kind":"ok","started_at":"2026-01-01T00:00:00Z"},{"ordinal":2,"route":"fallback","usage":{"input_tokens":3100,"output_tokens":0},"cost_usd":0,"kind":"rate_limited","started_at":"2026-01-01T00:00:01.1Z"}],"tenant":"acme","model":"chat","terminal":"succeeded","totals":{"attempts":2,"providers":["a","b"],"billable_tokens":3700,"cost_usd":0.01375}}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := refCanonicalize(doc); err != nil {
			b.Fatal(err)
		}
	}
}
