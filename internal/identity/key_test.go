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
