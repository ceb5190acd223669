// Package vkey makes and checks the secrets of virtual keys (docs/keys-and-teams.md):
// "og-" and 43 URL-safe characters (32 random bytes), shaped like other
// providers' keys so that secret scanners can be taught them. Only an
// HMAC-SHA256 digest of a secret, keyed by the deployment's secret, and
// a short display prefix are ever stored.
package vkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// Prefix starts every secret.
const Prefix = "og-"

// secretLen is a secret's length: the prefix and 32 bytes in unpadded
// URL-safe base64.
const secretLen = len(Prefix) + 43

// displayLen is how much of a secret a list shows.
const displayLen = len(Prefix) + 6

// New returns a new secret and its display prefix.
func New() (secret, display string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	secret = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, secret[:displayLen]
}

// NewID returns a new key id: "key_" and a time-ordered UUID's hex.
func NewID() string {
	u := uuid.Must(uuid.NewV7())
	return "key_" + hex.EncodeToString(u[:])
}

// Looks reports whether s has the shape of a secret New makes, so that
// anything else is refused without a digest or a lookup.
func Looks(s string) bool {
	if len(s) != secretLen || !strings.HasPrefix(s, Prefix) {
		return false
	}
	for _, c := range s[len(Prefix):] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Digest is what the store keeps of a secret: the hex HMAC-SHA256 of it
// keyed by the deployment's secret.
func Digest(deployment []byte, secret string) string {
	m := hmac.New(sha256.New, deployment)
	m.Write([]byte("oncegate virtual key\x00"))
	m.Write([]byte(secret))
	return hex.EncodeToString(m.Sum(nil))
}
