package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"order-42": true, "a": true, strings.Repeat("k", 255): true, "UUID:7f1c~!@#$%^&*()_+{}|<>?": true,
		"": false, strings.Repeat("k", 256): false, "has space": false, "tab\t": false, "naïve": false, "nul\x00": false, "\x7f": false,
	} {
		err := ValidateKey(key)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Errorf("%q: %v", key, err)
		}
		if err != nil && len(key) > 3 && strings.Contains(err.Error(), key) {
			t.Errorf("the error echoes the raw key: %v", err)
		}
	}
}

func TestKeyScopes(t *testing.T) {
	a, b := KeyDigest("acme", "chat.completions", "k"), KeyDigest("globex", "chat.completions", "k")
	c := KeyDigest("acme", "messages", "k")
	if a == b || a == c || len(a) != 64 {
		t.Fatalf("scoping failed: %s %s %s", a, b, c)
	}
	// No ambiguity from concatenation: ("ab","c") ≠ ("a","bc").
	if KeyDigest("ab", "c", "k") == KeyDigest("a", "bc", "k") {
		t.Fatal("separator missing")
	}
	s := []byte("secret")
	once, twice := Fingerprint(s, "acme", "op", "x"), Fingerprint(s, "acme", "op", "x")
	if once == Fingerprint([]byte("other"), "acme", "op", "x") || once != twice {
		t.Fatal("fingerprints must be keyed and deterministic")
	}
}

// A file key's scope is its tenant's, so its digests are those stored
// before virtual keys had scopes of their own; each virtual key's are
// its own, apart from the tenant's and from each other's.
func TestVirtualKeyScopes(t *testing.T) {
	const op = "chat.completions"
	// SHA-256("acme" 0x00 "chat.completions" 0x00 "order-42"): the digest
	// a file key's Idempotency-Key always had.
	const stored = "81ecd11c1f78981209a3dbd06801fb5b642d6672fe1d39d02786b11044060f53"
	if got := KeyDigest(Scope("acme", ""), op, "order-42"); got != KeyDigest("acme", op, "order-42") || got != stored {
		t.Fatalf("a file key's digest changed: %s", got)
	}
	s := []byte("secret")
	scopes := []string{Scope("acme", ""), Scope("acme", "key_a"), Scope("acme", "key_b"), Scope("globex", "key_a")}
	digests, fps := map[string]string{}, map[string]string{}
	for _, sc := range scopes {
		d, f := KeyDigest(sc, op, "order-42"), Fingerprint(s, sc, op, "x")
		if prev, dup := digests[d]; dup {
			t.Errorf("scopes %q and %q share a key digest", prev, sc)
		}
		if prev, dup := fps[f]; dup {
			t.Errorf("scopes %q and %q share a fingerprint", prev, sc)
		}
		digests[d], fps[f] = sc, sc
	}
}

// FuzzValidateKey: never panics, and accepts exactly 1–255 visible ASCII bytes.
func FuzzValidateKey(f *testing.F) {
	f.Add("order-42")
	f.Add("")
	f.Add("a b")
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		want := len(key) >= 1 && len(key) <= MaxKeyLen
		for i := 0; i < len(key); i++ {
			want = want && key[i] >= 0x21 && key[i] <= 0x7e
		}
		if (err == nil) != want {
			t.Fatalf("%q: %v", key, err)
		}
	})
}
