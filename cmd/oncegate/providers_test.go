package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// providersConfig has an azure-openai provider with a key from the
// environment and a header from a file.
const providersConfig = `
store: "memory://"
tenants: [{id: acme, api_key_env: CHECK_TENANT_KEY}]
providers:
  - id: azure-east
    type: azure-openai
    base_url: https://east.openai.azure.com
    api_version: "2024-10-21"
    api_key_env: CHECK_AZURE_KEY
    headers: {X-Team: payments, X-Tag: {file: tag.txt}}
  - {id: local, type: openai, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {id: east, provider: azure-east, model: gpt-4o, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: local, provider: local, model: m, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
models: [{name: chat, routes: [east, local]}]
`

func writeConfig(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tag.txt"), []byte("tag-secret-9f2c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// check --connect says which credential each provider uses, never a
// secret; a provider's credential that cannot be read fails it.
func TestCheckConnectNamesEachProvidersCredential(t *testing.T) {
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("CHECK_AZURE_KEY", "azure-secret-key-77aa")
	path := writeConfig(t, providersConfig)
	code, out, errOut := runCLI("check", "--connect", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"provider azure-east (azure-openai) at https://east.openai.azure.com: api-key from CHECK_AZURE_KEY; header X-Team, header X-Tag from file tag.txt",
		"provider local (openai) at http://127.0.0.1:1/v1: no credential (requests carry none)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, "azure-secret-key-77aa") || strings.Contains(out+errOut, "tag-secret-9f2c") {
		t.Fatal("a secret was printed")
	}

	os.Unsetenv("CHECK_AZURE_KEY")
	code, out, errOut = runCLI("check", "--connect", "--config", path)
	if code != 1 || !strings.Contains(errOut, path+":9:18: providers[0].api_key_env: environment variable CHECK_AZURE_KEY is not set") ||
		strings.Contains(out, "configuration OK") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// check refuses a provider without its type's required keys, or with a
// key its type does not know, each with its position.
func TestCheckHoldsProvidersToTheirTypesKeys(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{`    api_version: "2024-10-21"`, `    region: us-east-1`, `:8:13: providers[0].region: provider type azure-openai has no key "region"`},
		{`    api_key_env: CHECK_AZURE_KEY`, `    aws_profile: default`, `providers[0]: provider type azure-openai needs api_key_env or api_key_file`},
		{`    base_url: https://east.openai.azure.com`, ``, `providers[0]: provider type azure-openai needs base_url`},
		{`    type: azure-openai`, `    type: cohere`, `providers[0].type: unknown provider type "cohere"`},
		{`X-Tag: {file: tag.txt}`, `X-Tag: {vault: tag}`, `:10:41: providers[0].headers.X-Tag: unknown source "vault"`},
	} {
		src := strings.Replace(providersConfig, c.from, c.to, 1)
		code, _, errOut := runCLI("check", "--config", writeConfig(t, src))
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s → %s: exit %d, want %q in\n%s", c.from, c.to, code, c.want, errOut)
		}
	}
}

// The Azure example checks, and --connect names its key's source.
func TestCheckAzureExample(t *testing.T) {
	t.Setenv("ONCEGATE_KEY_DEV", "sk-dev")
	t.Setenv("AZURE_OPENAI_KEY", "azure-mock-key")
	code, out, errOut := runCLI("check", "--connect", "--config", "../../examples/azure.yaml")
	if code != 0 || !strings.Contains(out, "provider azure-east (azure-openai) at http://127.0.0.1:9090: api-key from AZURE_OPENAI_KEY; header x-ms-client-request-source") ||
		!strings.Contains(out, "configuration OK") || strings.Contains(out, "azure-mock-key") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}
