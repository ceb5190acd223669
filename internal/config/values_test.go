package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A provider's headers: and query: take a string, {env: NAME} or
// {file: PATH}; the environment and files are read with the secrets.
func TestProviderHeadersAndQuery(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tag.txt"), []byte("  from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(minimal, `base_url: "http://127.0.0.1:1/v1"}`,
		`base_url: "http://127.0.0.1:1/v1", headers: {X-Team: payments, X-Secret: {env: TAG_ENV}, X-File: {file: tag.txt}}, query: {hint: east}}`, 1)
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Providers[0].Headers
	if len(h) != 3 || h[0].Literal != "payments" || h[1].Env != "TAG_ENV" || !h[1].Secret || h[2].File != "tag.txt" || h[1].Source() != "env TAG_ENV" {
		t.Fatalf("headers %+v", h)
	}
	s, err := cfg.ResolveSecrets(func(k string) (string, bool) {
		return map[string]string{"KEY_ACME": "k", "TAG_ENV": "from-env"}[k], true
	})
	if err != nil {
		t.Fatal(err)
	}
	got := s.ProviderHeaders["p"]
	if got["X-Team"] != "payments" || got["X-Secret"] != "from-env" || got["X-File"] != "from-a-file" || s.ProviderQuery["p"]["hint"] != "east" {
		t.Fatalf("values %v %v", got, s.ProviderQuery)
	}
	if len(s.ValueSecrets) != 2 {
		t.Fatalf("the secrets to scrub: %d, want the env and the file's", len(s.ValueSecrets))
	}

	// A variable that is not set, or a file that is missing, is an
	// error at the value's position, naming no secret.
	_, err = cfg.ResolveSecrets(func(k string) (string, bool) { return map[string]string{"KEY_ACME": "k"}[k], k == "KEY_ACME" })
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:") || !strings.Contains(err.Error(), "providers[0].headers.X-Secret: environment variable TAG_ENV is not set") {
		t.Fatalf("missing env: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "tag.txt")); err != nil {
		t.Fatal(err)
	}
	_, err = cfg.ResolveSecrets(func(k string) (string, bool) { return "v", true })
	if err == nil || !strings.Contains(err.Error(), "providers[0].headers.X-File") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestProviderValuesForms(t *testing.T) {
	for _, c := range []struct{ with, want string }{
		{`headers: {X-A: {vault: x}}`, `3:`},
		{`headers: {X-A: {vault: x}}`, `providers[0].headers.X-A: unknown source "vault": want {env: NAME} or {file: PATH}`},
		{`headers: {X-A: 12}`, `providers[0].headers.X-A: want a string, {env: NAME} or {file: PATH}, found integer "12"`},
		{`headers: {X-A: {env: A, file: B}}`, `providers[0].headers.X-A: want a string, {env: NAME} or {file: PATH}, found a mapping of 2 keys`},
		{`query: [a, b]`, `providers[0].query: want a mapping of names to values, found a list`},
	} {
		src := strings.Replace(minimal, `base_url: "http://127.0.0.1:1/v1"}`, `base_url: "http://127.0.0.1:1/v1", `+c.with+`}`, 1)
		_, err := Parse("v.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want %q, got %v", c.with, c.want, err)
		}
	}
}
