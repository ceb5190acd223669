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

// KeyDigest is key_sha256: SHA-256(tenant ‖ 0x00 ‖ operation ‖ 0x00 ‖ key).
// The ledger stores only this, never the raw key; the scope keeps tenant
// A's key k and tenant B's key k apart.
func KeyDigest(tenant, operation, key string) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(operation))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// Fingerprint identifies a keyless logical request:
// HMAC-SHA256(secret, tenant ‖ 0x00 ‖ operation ‖ 0x00 ‖ request_sha256).
// Without the gateway secret nobody can tell which request a fingerprint
// stands for.
func Fingerprint(secret []byte, tenant, operation, requestSHA256 string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(operation))
	m.Write([]byte{0})
	m.Write([]byte(requestSHA256))
	return hex.EncodeToString(m.Sum(nil))
}
