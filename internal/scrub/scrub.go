// Package scrub redacts the configured secrets from provider text before
// it is kept (receipts, logs) or passed on to a client (docs/errors.md,
// "Provider text").
package scrub

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/provider"
)

// Provider text that is kept (receipts, logs) or passed on to a client
// is scrubbed of the configured secrets first (docs/errors.md). A provider
// may echo a key whole, cut short, upper-cased or encoded, so the scrubber
// looks for any piece of a secret at least Window characters long,
// in any letter case, as the secret is written and as base64 (standard and
// URL alphabets, padded or not, at every alignment), hex and
// percent-encoding write it.

// Window is the shortest piece of a secret that is redacted; a
// secret shorter than this is not scrubbed at all (it would match
// ordinary words).
const Window = 8

// Redacted replaces each piece of a secret.
const Redacted = "[redacted]"

// Scrubber redacts pieces of secrets from text. It is immutable, and so
// safe for concurrent use.
type Scrubber struct {
	// windows holds every Window-byte run, ASCII lower-cased, of
	// every secret and of each of its encodings.
	windows map[string]struct{}
}

// SecretsOf lists the configured secrets worth scrubbing: those at least
// Window characters long.
func SecretsOf(s *config.Secrets) []string {
	var out []string
	add := func(v string) {
		if len(v) >= Window {
			out = append(out, v)
		}
	}
	for k := range s.TenantKeys {
		add(k)
	}
	for _, k := range s.ProviderKeys {
		add(k)
	}
	for _, v := range s.ValueSecrets {
		add(v)
	}
	add(s.GatewaySecret)
	add(s.AdminKey)
	return out
}

// New returns a scrubber for secrets.
func New(secrets []string) *Scrubber {
	sc := &Scrubber{windows: map[string]struct{}{}}
	for _, s := range secrets {
		if len(s) < Window {
			continue
		}
		for _, form := range encodings(s) {
			form = foldASCII(form)
			for i := 0; i+Window <= len(form); i++ {
				sc.windows[form[i:i+Window]] = struct{}{}
			}
		}
	}
	return sc
}

// encodings are the forms in which a piece of s may be echoed, each
// holding, for every piece of s at least Window long, a run at least
// Window long of that piece's own encoding: s itself; hex (a
// piece's hex is a run of s's); percent-encoding (a piece's is a run of
// s's); base64 of s from each of its first three bytes (a piece's base64,
// but for its last partial group, is a run of the one aligned with it;
// and its complete groups — two or more for a piece of 8 or more — are at
// least 8 characters).
func encodings(s string) []string {
	out := []string{s, hex.EncodeToString([]byte(s)), url.QueryEscape(s), url.PathEscape(s)}
	for a := 0; a < 3 && a < len(s); a++ {
		b := []byte(s[a:])
		out = append(out, base64.StdEncoding.EncodeToString(b), base64.URLEncoding.EncodeToString(b))
	}
	return out
}

// scrub replaces every run of text that is a piece of a secret, in any
// encoding and letter case, by "[redacted]".
func (sc *Scrubber) Text(text string) string {
	if sc == nil || len(sc.windows) == 0 || len(text) < Window {
		return text
	}
	folded := foldASCII(text)
	var b strings.Builder
	start, end := 0, 0 // the redacted run being grown: text[start:end]
	last := 0          // text before last is written
	for i := 0; i+Window <= len(text); i++ {
		if _, ok := sc.windows[folded[i:i+Window]]; !ok {
			continue
		}
		if i > end || end == 0 {
			if end > 0 {
				b.WriteString(text[last:start])
				b.WriteString(Redacted)
				last = end
			}
			start = i
		}
		end = i + Window
	}
	if end == 0 {
		return text
	}
	b.WriteString(text[last:start])
	b.WriteString(Redacted)
	b.WriteString(text[end:])
	return b.String()
}

// foldASCII lower-cases ASCII letters only, so that every byte keeps its
// place.
func foldASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// Error redacts the configured secrets from every text field of a
// provider's error, in place, before it is kept or passed on.
func (sc *Scrubber) Error(e *provider.UpstreamError) *provider.UpstreamError {
	if e != nil {
		e.Message, e.Code, e.Type, e.Param = sc.Text(e.Message), sc.Text(e.Code), sc.Text(e.Type), sc.Text(e.Param)
	}
	return e
}
