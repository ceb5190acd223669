package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withTenant is minimal with its tenant's key source replaced by src.
func withTenant(src string) string {
	return strings.Replace(minimal, "{id: acme, api_key_env: KEY_ACME}", "{id: acme"+src+"}", 1)
}

// Every secret may come from a file instead of a variable: read at each
// resolve (start, reload), relative to the configuration's directory,
// without its trailing newline, and a changed file gives the new value.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("acme.key", "sk-acme-one\n")
	write("acme-next.key", "sk-acme-next\n")
	write("provider.key", "sk-provider")
	write("admin.key", " sk-admin \n")
	write("secret", "fingerprint-secret\n")
	text := withTenant(", api_key_file: acme.key, api_key_files: [acme-next.key]") +
		"admin_key_file: admin.key\nsecret_file: " + filepath.Join(dir, "secret") + "\n"
	text = strings.Replace(text, `base_url: "http://127.0.0.1:1/v1"}`, `base_url: "http://127.0.0.1:1/v1", api_key_file: provider.key}`, 1)
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	s, err := cfg.ResolveSecrets(noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if s.TenantKeys["sk-acme-one"] != "acme" || s.TenantKeys["sk-acme-next"] != "acme" || len(s.TenantKeys) != 2 ||
		s.ProviderKeys["p"] != "sk-provider" || s.AdminKey != "sk-admin" || s.GatewaySecret != "fingerprint-secret" {
		t.Fatalf("resolved %+v", s)
	}
	write("acme.key", "sk-acme-two\n")
	if s, err = cfg.ResolveSecrets(noEnv); err != nil || s.TenantKeys["sk-acme-two"] != "acme" || s.TenantKeys["sk-acme-one"] != "" {
		t.Fatalf("after the file changed: %+v %v", s, err)
	}
}

// A secret file that cannot be used is an error at its key's position
// that names the file and never its content.
func TestUnusableSecretFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"empty": " \n", "two-lines": "sk-one\nsk-two\n", "big": strings.Repeat("k", MaxSecretFileBytes+1)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{"missing", "no such file"}, {"empty", "is empty"}, {"two-lines", "more than one line"}, {"big", "larger than"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, err := Parse(filepath.Join(dir, "gw.yaml"), []byte(withTenant(", api_key_file: "+tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = cfg.ResolveSecrets(func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), "gw.yaml:2:") || !strings.Contains(err.Error(), "tenants[0].api_key_file") ||
				!strings.Contains(err.Error(), filepath.Join(dir, tc.file)) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "sk-one") {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// Each secret has one source: a tenant's key exactly one of api_key_env
// and api_key_file, every other at most one of its pair — refused with
// positions when the file is parsed, so `oncegate check` refuses it.
func TestOneSourcePerSecret(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"tenant without a key", withTenant(""), `min.yaml:2:11: tenants[0].api_key_env: missing api_key_env or api_key_file`},
		{"tenant with both", withTenant(", api_key_env: K, api_key_file: k"), `tenants[0].api_key_file: set api_key_env or api_key_file, not both`},
		{"admin with both", minimal + "admin_key_env: A\nadmin_key_file: a\n", `min.yaml:13:17: admin_key_file: set admin_key_env or admin_key_file, not both`},
		{"secret with both", minimal + "secret_env: S\nsecret_file: s\n", `secret_file: set secret_env or secret_file, not both`},
		{"empty file name", withTenant(`, api_key_env: K, api_key_files: [""]`), `tenants[0].api_key_files[0]: empty file name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("min.yaml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}
