package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// MaxKeyLen is the longest Idempotency-Key accepted.
const MaxKeyLen = 255

// ErrInvalidKey reports an Idempotency-Key outside docs/identity.md's form.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ValidateKey checks an Idempotency-Key: 1–255 visible ASCII characters
// (0x21–0x7E). The error says what is wrong without echoing the key.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: it is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: it is %d bytes long; the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %d is 0x%02x; only visible ASCII (0x21-0x7E) is allowed", ErrInvalidKey, i, c)
		}
	}
	return nil
}

// Scope is whose identities a request's are (docs/identity.md): the
// tenant, for the tenant's own keys from the configuration, which share
// one scope; tenant ‖ 0x00 ‖ "key:" ‖ virtualKey for a virtual key, whose
// Idempotency-Keys and fingerprints are its own. A file key's scope is
// the tenant id alone, so the digests stored before virtual keys had
// scopes of their own still match.
func Scope(tenant, virtualKey string) string {
	if virtualKey == "" {
		return tenant
	}
	return tenant + "\x00key:" + virtualKey
}

// KeyDigest is key_sha256: SHA-256(scope ‖ 0x00 ‖ operation ‖ 0x00 ‖ key),
// scope as Scope makes it. The ledger stores only this, never the raw
// key; the scope keeps tenant A's key k and tenant B's key k apart, and
// one virtual key's k and another's.
func KeyDigest(scope, operation, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint identifies a keyless logical request:
// HMAC-SHA256(secret, scope ‖ 0x00 ‖ operation ‖ 0x00 ‖ request_sha256),
// scope as Scope makes it. Without the gateway secret nobody can tell
// which request a fingerprint stands for.
func Fingerprint(secret []byte, scope, operation, requestSHA256 string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(scope))
	m.Write([]byte{0})
	m.Write([]byte(operation))
	m.Write([]byte{0})
	m.Write([]byte(requestSHA256))
	return hex.EncodeToString(m.Sum(nil))
}
