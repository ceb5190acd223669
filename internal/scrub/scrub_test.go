package scrub_test

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/scrub"
	"github.com/oncegate/oncegate/internal/scrub/scrubtest"
)

func TestScrubbingCatchesEchoedPiecesOfASecret(t *testing.T) {
	const key = "sk-proj-Ab3+xY9/Qw7_zK2=mN5pLr8T" // with the characters encodings change
	sc := scrub.New([]string{key, "another-secret-42"})
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
		for fname, form := range scrubtest.EchoForms {
			echo := form(piece)
			text := `Incorrect API key provided: "` + echo + `". You can find your API key at https://platform.example/account/api-keys.`
			got := sc.Text(text)
			if s := scrubtest.Survivor(key, got); s != "" {
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
		if got := sc.Text(text); got != text {
			t.Errorf("%q became %q", text, got)
		}
	}
	// Two echoes are two redactions.
	if got := sc.Text(key + " and " + strings.ToUpper("another-secret-42")); got != "[redacted] and [redacted]" {
		t.Errorf("two echoes: %q", got)
	}
}

// A provider error's every text field is scrubbed, in place.
func TestAProvidersErrorIsScrubbedInEveryField(t *testing.T) {
	const key = "sk-provider-primary-7f3a9c"
	e := scrub.New([]string{key}).Error(&provider.UpstreamError{Status: 400, Message: "invalid key " + strings.ToUpper(key[:12]), Code: key,
		Param: "param-" + key[3:14], Type: base64.StdEncoding.EncodeToString([]byte(key))})
	for _, f := range []string{e.Message, e.Code, e.Type, e.Param} {
		if s := scrubtest.Survivor(key, f); s != "" || !strings.Contains(f, scrub.Redacted) {
			t.Errorf("%q keeps %q", f, s)
		}
	}
}

// Whatever the secret and wherever a piece of it is echoed, in whatever
// form, no piece of it scrub.Window or longer survives in any form.
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
		if len(secret) < scrub.Window || len(secret) > 64 {
			return
		}
		i := int(from) % (len(secret) - scrub.Window + 1)
		j := i + scrub.Window + int(n)%(len(secret)-i-scrub.Window+1)
		names := make([]string, 0, len(scrubtest.EchoForms))
		for name := range scrubtest.EchoForms {
			names = append(names, name)
		}
		slices.Sort(names)
		echo := scrubtest.EchoForms[names[int(form)%len(names)]](string(secret[i:j]))
		got := scrub.New([]string{string(secret)}).Text(before + echo + after)
		if s := scrubtest.Survivor(string(secret), got); s != "" {
			t.Fatalf("secret %q, echo %q: %q survives in %q", secret, echo, s, got)
		}
	})
}
