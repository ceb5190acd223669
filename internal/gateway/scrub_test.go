package gateway

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/provider"
)

// echoForms are the ways a provider may echo a piece of a secret that the
// scrubber must catch: as written, in other letter cases, and encoded.
var echoForms = map[string]func(string) string{
	"as is":              func(s string) string { return s },
	"upper":              strings.ToUpper,
	"lower":              strings.ToLower,
	"base64":             func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"base64, no padding": func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) },
	"base64url":          func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) },
	"base64url, no pad":  func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) },
	"hex":                func(s string) string { return hex.EncodeToString([]byte(s)) },
	"HEX":                func(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) },
	"query-escaped":      url.QueryEscape,
	"path-escaped":       url.PathEscape,
	// Inside a longer encoded value, at each alignment.
	"base64 after 1 byte":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte("=" + s)) },
	"base64 after 2 bytes": func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte("k=" + s)) },
	"base64 of key=…":      func(s string) string { return base64.StdEncoding.EncodeToString([]byte("key=" + s)) },
}

// survivor returns a piece of secret, at least scrubWindow long, that
// text still holds in one of the echo forms (any letter case), or "".
// The redaction marks separate what they redacted; they are not text.
func survivor(secret, text string) string {
	for _, part := range strings.Split(strings.ToLower(text), redacted) {
		for i := 0; i+scrubWindow <= len(secret); i++ {
			for j := i + scrubWindow; j <= len(secret); j++ {
				for _, form := range echoForms {
					if strings.Contains(part, strings.ToLower(form(secret[i:j]))) {
						return secret[i:j]
					}
				}
			}
		}
	}
	return ""
}

func TestScrubbingCatchesEchoedPiecesOfASecret(t *testing.T) {
	const key = "sk-proj-Ab3+xY9/Qw7_zK2=mN5pLr8T" // with the characters encodings change
	sc := newScrubber([]string{key, "another-secret-42"})
	pieces := map[string]string{
		"whole":           key,
		"first 8":         key[:8],
		"first 12":        key[:12],
		"all but the end": key[:len(key)-1],
		"last 9":          key[len(key)-9:],
		"a middle piece":  key[5:17],
		"from offset 1":   key[1:20],
		"from offset 2":   key[2:21],
	}
	for pname, piece := range pieces {
		for fname, form := range echoForms {
			echo := form(piece)
			text := `Incorrect API key provided: "` + echo + `". You can find your API key at https://platform.example/account/api-keys.`
			got := sc.scrub(text)
			if s := survivor(key, got); s != "" {
				t.Errorf("%s, %s: %q survives in %q", pname, fname, s, got)
			}
			if !strings.HasPrefix(got, "Incorrect API key provided: ") || !strings.HasSuffix(got, "find your API key at https://platform.example/account/api-keys.") {
				t.Errorf("%s, %s: the rest of the text was lost: %q", pname, fname, got)
			}
		}
	}
	// Text with no piece of a secret passes whole; a piece shorter than
	// the window is left (it would match ordinary words).
	for _, text := range []string{"", "model not found", "Request id req_0123456789abcdef: rate limited", key[:7]} {
		if got := sc.scrub(text); got != text {
			t.Errorf("%q became %q", text, got)
		}
	}
	// Two echoes are two redactions.
	if got := sc.scrub(key + " and " + strings.ToUpper("another-secret-42")); got != "[redacted] and [redacted]" {
		t.Errorf("two echoes: %q", got)
	}
}

// A provider error's every text field is scrubbed, in place.
func TestAProvidersErrorIsScrubbedInEveryField(t *testing.T) {
	const key = "sk-provider-primary-7f3a9c"
	g := &Gateway{}
	g.cur.Store(&live{scrub: newScrubber([]string{key})})
	e := g.scrubError(&provider.UpstreamError{Status: 400, Message: "invalid key " + strings.ToUpper(key[:12]), Code: key,
		Param: "param-" + key[3:14], Type: base64.StdEncoding.EncodeToString([]byte(key))})
	for _, f := range []string{e.Message, e.Code, e.Type, e.Param} {
		if s := survivor(key, f); s != "" || !strings.Contains(f, redacted) {
			t.Errorf("%q keeps %q", f, s)
		}
	}
}

// Whatever the secret and wherever a piece of it is echoed, in whatever
// form, no piece of it scrubWindow or longer survives in any form.
func FuzzScrub(f *testing.F) {
	f.Add([]byte("sk-proj-Ab3+xY9/Qw7_zK2=mN5pLr8T"), uint8(0), uint8(12), uint8(0), "before ", " after")
	f.Add([]byte("AKIAIOSFODNN7EXAMPLE"), uint8(3), uint8(9), uint8(3), "", "")
	f.Add([]byte("12345678"), uint8(0), uint8(8), uint8(7), "x", "12345678")
	f.Fuzz(func(t *testing.T, raw []byte, from, n, form uint8, before, after string) {
		// A secret of the characters keys are made of.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/="
		secret := make([]byte, len(raw))
		for i, c := range raw {
			secret[i] = alphabet[int(c)%len(alphabet)]
		}
		if len(secret) < scrubWindow || len(secret) > 64 {
			return
		}
		i := int(from) % (len(secret) - scrubWindow + 1)
		j := i + scrubWindow + int(n)%(len(secret)-i-scrubWindow+1)
		names := make([]string, 0, len(echoForms))
		for name := range echoForms {
			names = append(names, name)
		}
		slices.Sort(names)
		echo := echoForms[names[int(form)%len(names)]](string(secret[i:j]))
		got := newScrubber([]string{string(secret)}).scrub(before + echo + after)
		if s := survivor(string(secret), got); s != "" {
			t.Fatalf("secret %q, echo %q: %q survives in %q", secret, echo, s, got)
		}
	})
}
