// Package identity derives the identities of docs/identity.md: RFC 8785 canonical
// JSON and the digests built on it.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrNotCanonicalizable reports input that is not I-JSON (RFC 7493): invalid
// JSON, duplicate object keys, invalid UTF-8 or numbers outside float64.
var ErrNotCanonicalizable = errors.New("not canonicalizable JSON")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// Canonicalize returns the RFC 8785 (JCS) form of a JSON document: object
// members sorted by UTF-16 code units, no insignificant whitespace, strings
// minimally escaped, numbers in ECMAScript's shortest form. Two documents
// that differ only in key order or whitespace canonicalize identically.
// Input that is not I-JSON (invalid JSON or UTF-8, duplicate keys, numbers
// beyond float64) is rejected with ErrNotCanonicalizable.
//
// It is one pass over the input with a handful of allocations: it runs on
// every request body and twice on every receipt.
func Canonicalize(doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotCanonicalizable)
	}
	c := &canon{in: doc, out: make([]byte, 0, len(doc))}
	c.ws()
	if err := c.value(0); err != nil {
		return nil, err
	}
	c.ws()
	if c.pos != len(c.in) {
		return nil, c.fail("trailing data after the document")
	}
	return c.out, nil
}

// MarshalCanonical encodes v with encoding/json and canonicalizes it.
func MarshalCanonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return Canonicalize(raw)
}

// SHA256Hex is the lowercase hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CanonicalSHA256 is the hex SHA-256 of v's canonical JSON.
func CanonicalSHA256(v any) (string, error) {
	b, err := MarshalCanonical(v)
	if err != nil {
		return "", err
	}
	return SHA256Hex(b), nil
}

// FormatES6 formats a finite float64 as ECMAScript does.
func FormatES6(f float64) string {
	if f == 0 {
		return "0" // also -0
	}
	abs := math.Abs(f)
	if abs >= 1e-6 && abs < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(s, "e")
	sign := exp[0]
	digits := strings.TrimLeft(exp[1:], "0")
	return mant + "e" + string(sign) + digits
}
