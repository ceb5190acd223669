package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// entraCheckConfig has an azure-openai provider with auth: entra.
const entraCheckConfig = `
store: "memory://"
tenants: [{id: acme, api_key_env: CHECK_TENANT_KEY}]
providers:
  - id: azure-mi
    type: azure-openai
    base_url: https://east.openai.azure.com
    api_version: "2024-10-21"
    auth: entra
    tenant_id: "` + mock.DefaultEntraTenant + `"
    client_id: "` + mock.DefaultEntraClient + `"
routes:
  - {id: east, provider: azure-mi, model: gpt-4o, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
models: [{name: chat, routes: [east]}]
`

// check holds auth to its values and each auth to its keys, each
// mistake at its position: entra takes no key, key no tenant or client
// id, and no other type takes auth.
func TestCheckHoldsEntraToItsKeys(t *testing.T) {
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("CHECK_AZURE_KEY", "azure-secret-key-77aa")
	for _, c := range []struct{ from, to, want string }{
		{`    auth: entra`, "    auth: entra\n    api_key_env: CHECK_AZURE_KEY",
			`:10:18: providers[0].api_key_env: provider type azure-openai with auth: entra has no key "api_key_env" (its keys: base_url, api_version, auth, tenant_id, client_id)`},
		{`    auth: entra`, "    auth: entra\n    api_key_file: key.txt", `:10:19: providers[0].api_key_file: provider type azure-openai with auth: entra has no key "api_key_file"`},
		{`    auth: entra`, `    auth: oauth`, `:9:11: providers[0].auth: unknown value "oauth" (want key or entra)`},
		{`    auth: entra`, "    auth: key\n    api_key_env: CHECK_AZURE_KEY", `:11:16: providers[0].tenant_id: provider type azure-openai has no key "tenant_id"`},
		{`    auth: entra`, "    api_key_env: CHECK_AZURE_KEY", `:10:16: providers[0].tenant_id: provider type azure-openai has no key "tenant_id"`},
		{`    auth: entra`, ``, `providers[0]: provider type azure-openai needs api_key_env or api_key_file`},
		{`    type: azure-openai`, `    type: openai`, `:9:11: providers[0].auth: provider type openai has no key "auth"`},
	} {
		src := strings.Replace(entraCheckConfig, c.from, c.to, 1)
		path := writeConfig(t, src)
		code, out, errOut := runCLI("check", "--config", path)
		if strings.HasPrefix(c.want, ":") {
			c.want = path + c.want // with its position
		}
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(out, "configuration OK") {
			t.Errorf("%q → %q: exit %d, want %q\n%s", c.from, c.to, code, c.want, errOut)
		}
	}
	if code, out, errOut := runCLI("check", "--config", writeConfig(t, entraCheckConfig)); code != 0 {
		t.Fatalf("auth: entra: exit %d\n%s\n%s", code, out, errOut)
	}
}

// check --connect obtains a token from Microsoft Entra ID (the mock's,
// over TLS) and names the credential of the chain that answered, never
// a secret or the token; a credential Entra ID refuses fails the check.
func TestCheckConnectObtainsAnEntraToken(t *testing.T) {
	m := mock.New(mock.Config{})
	defer m.Close()
	srv := httptest.NewTLSServer(m)
	defer srv.Close()
	tokenAuthority = &provider.TokenAuthority{URL: srv.URL, Client: mock.OnlyTo(srv.Client(), srv.URL)}
	t.Cleanup(func() { tokenAuthority = nil })
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("AZURE_CLIENT_SECRET", mock.DefaultEntraSecret)
	t.Setenv("AZURE_TOKEN_CREDENTIALS", "prod") // never a developer's own az login
	path := writeConfig(t, entraCheckConfig)

	code, out, errOut := runCLI("check", "--connect", "--config", path)
	want := "provider azure-mi (azure-openai) at https://east.openai.azure.com: Microsoft Entra ID token from ClientSecretCredential (client " +
		mock.DefaultEntraClient + ", tenant " + mock.DefaultEntraTenant + ", secret from AZURE_CLIENT_SECRET)"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %q\n%s\n%s", code, want, out, errOut)
	}
	if n := m.EntraTokensIssued(); n != 1 {
		t.Errorf("check --connect obtained %d tokens, want 1", n)
	}
	if strings.Contains(out+errOut, mock.DefaultEntraSecret) || strings.Contains(out+errOut, "entra-mock-") {
		t.Fatal("a secret or the token was printed")
	}

	t.Setenv("AZURE_CLIENT_SECRET", "a-wrong-secret-31c5")
	code, out, errOut = runCLI("check", "--connect", "--config", path)
	if code != 1 || !strings.Contains(errOut, "provider azure-mi (azure-openai)") ||
		!strings.Contains(errOut, "Microsoft Entra ID refused the credential: ClientSecretCredential (HTTP 401 invalid_client AADSTS7000215)") ||
		strings.Contains(out+errOut, "a-wrong-secret-31c5") || strings.Contains(out, "configuration OK") {
		t.Fatalf("refused: exit %d\n%s\n%s", code, out, errOut)
	}
}

// On App Service (and Functions, Container Apps) the managed identity's
// endpoint is in IDENTITY_ENDPOINT: check --connect obtains its token —
// the user-assigned identity client_id names — and names it.
func TestCheckConnectObtainsAManagedIdentityToken(t *testing.T) {
	// The SDK caches managed identity tokens for the whole process: an
	// identity of this run's own.
	client := uuid.NewString()
	m := mock.New(mock.Config{Entra: mock.EntraConfig{ClientID: client}})
	defer m.Close()
	srv := httptest.NewTLSServer(m)
	defer srv.Close()
	tokenAuthority = &provider.TokenAuthority{URL: srv.URL, Client: mock.OnlyTo(srv.Client(), srv.URL)}
	t.Cleanup(func() { tokenAuthority = nil })
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("IDENTITY_ENDPOINT", srv.URL+"/msi/token")
	t.Setenv("IDENTITY_HEADER", mock.DefaultIdentityHeader)
	t.Setenv("AZURE_TOKEN_CREDENTIALS", "prod")
	path := writeConfig(t, strings.Replace(entraCheckConfig, mock.DefaultEntraClient, client, 1))

	code, out, errOut := runCLI("check", "--connect", "--config", path)
	want := "provider azure-mi (azure-openai) at https://east.openai.azure.com: Microsoft Entra ID token from ManagedIdentityCredential (user-assigned, client " +
		client + ", AppService)"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %q\n%s\n%s", code, want, out, errOut)
	}
	if n := m.EntraTokensIssued(); n != 1 {
		t.Errorf("check --connect obtained %d tokens, want 1", n)
	}
	if strings.Contains(out+errOut, mock.DefaultIdentityHeader) || strings.Contains(out+errOut, "entra-mock-") {
		t.Fatal("a secret or the token was printed")
	}
}
