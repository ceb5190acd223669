package vkey

import (
	"strings"
	"testing"
)

func TestSecretsLookLikeKeysAndDigestsDoNotAuthenticate(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s, display := New()
		if !Looks(s) || !strings.HasPrefix(s, display) || seen[s] {
			t.Fatalf("secret %q (display %q): not one of ours, or repeated", s, display)
		}
		seen[s] = true
		d := Digest([]byte("deployment"), s)
		if Looks(d) || Digest([]byte("deployment"), d) == d {
			t.Fatal("a digest passes for a secret")
		}
		if Digest([]byte("other"), s) == d {
			t.Fatal("the digest does not depend on the deployment's secret")
		}
	}
	for _, bad := range []string{"", "og-", "sk-" + strings.Repeat("a", 43), "og-" + strings.Repeat("a", 42) + "!", "og-" + strings.Repeat("a", 44)} {
		if Looks(bad) {
			t.Errorf("Looks(%q) = true", bad)
		}
	}
}
