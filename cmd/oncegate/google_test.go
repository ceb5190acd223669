package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
)

const googleCheckConfig = `
store: "memory://"
tenants: [{id: acme, api_key_env: CHECK_TENANT_KEY}]
providers:
  - {id: gem, type: gemini, base_url: "MOCK", api_key_env: CHECK_GEMINI_KEY}
  - id: vx
    type: vertex
    project: oncegate-mock
    location: us-east5
    publisher: anthropic
    base_url: "MOCK"
    credentials_file_env: CHECK_SA_FILE
routes:
  - {id: gem, provider: gem, model: gemini-2.5-flash, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: vx, provider: vx, model: claude-v, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
models: [{name: chat, routes: [gem, vx]}]
`

// check refuses a vertex provider without project; check --connect
// fetches a token from the service account's token_uri (the mock's) and
// names the account and the key's variable, never a secret; a service
// account the token endpoint refuses fails the check.
func TestCheckGoogleProviders(t *testing.T) {
	m := mock.New(mock.Config{})
	defer m.Close()
	srv := httptest.NewServer(m)
	defer srv.Close()
	dir := t.TempDir()
	sa := filepath.Join(dir, "sa.json")
	if err := os.WriteFile(sa, mock.ServiceAccountJSON(srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("CHECK_GEMINI_KEY", mock.DefaultGeminiAPIKey)
	t.Setenv("CHECK_SA_FILE", sa)
	src := strings.ReplaceAll(googleCheckConfig, "MOCK", srv.URL)

	code, _, errOut := runCLI("check", "--config", writeConfig(t, strings.Replace(src, "    project: oncegate-mock\n", "", 1)))
	if code != 1 || !strings.Contains(errOut, "provider type vertex needs project") {
		t.Fatalf("vertex without project: exit %d\n%s", code, errOut)
	}

	code, out, errOut := runCLI("check", "--connect", "--config", writeConfig(t, src))
	if code != 0 || !strings.Contains(out, "provider gem (gemini) at "+srv.URL+": x-goog-api-key from CHECK_GEMINI_KEY") ||
		!strings.Contains(out, "provider vx (vertex) at "+srv.URL+": OAuth2 bearer token of service account "+mock.DefaultServiceAccountEmail+" (key file from CHECK_SA_FILE)") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if m.TokensIssued() != 1 {
		t.Errorf("check --connect obtained %d tokens, want 1", m.TokensIssued())
	}
	if strings.Contains(out+errOut, "PRIVATE KEY") || strings.Contains(out+errOut, mock.DefaultGeminiAPIKey) || strings.Contains(out+errOut, "ya29") {
		t.Fatal("a secret was printed")
	}

	other := strings.Replace(string(mock.ServiceAccountJSON(srv.URL)), mock.DefaultServiceAccountEmail, "stranger@x.iam.gserviceaccount.com", 1)
	if err := os.WriteFile(sa, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI("check", "--connect", "--config", writeConfig(t, src))
	if code != 1 || !strings.Contains(errOut, "provider vx (vertex)") || !strings.Contains(errOut, "refused the service account") ||
		strings.Contains(out+errOut, "PRIVATE KEY") {
		t.Fatalf("refused account: exit %d\n%s\n%s", code, out, errOut)
	}
}
