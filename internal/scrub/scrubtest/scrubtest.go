// Package scrubtest finds what a scrubber missed, for tests of the
// places that scrub provider text.
package scrubtest

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"

	"github.com/oncegate/oncegate/internal/scrub"
)

// Survivor returns a piece of secret, at least scrub.Window long, that
// text still holds in one of the echo forms (any letter case), or "".
// The redaction marks separate what they redacted; they are not text.
func Survivor(secret, text string) string {
	for _, part := range strings.Split(strings.ToLower(text), scrub.Redacted) {
		for i := 0; i+scrub.Window <= len(secret); i++ {
			for j := i + scrub.Window; j <= len(secret); j++ {
				for _, form := range EchoForms {
					if strings.Contains(part, strings.ToLower(form(secret[i:j]))) {
						return secret[i:j]
					}
				}
			}
		}
	}
	return ""
}

// EchoForms are the ways a provider may echo a piece of a secret that the
// scrubber must catch: as written, in other letter cases, and encoded.
var EchoForms = map[string]func(string) string{
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
