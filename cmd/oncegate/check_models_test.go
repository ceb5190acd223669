package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
)

// modelsCheckConfig has a route on each provider type, every one on the
// mock but a vLLM-like server that answers only its list of models.
const modelsCheckConfig = `
store: "memory://"
tenants: [{id: acme, api_key_env: CHECK_TENANT_KEY}]
providers:
  - {id: oai, type: openai, base_url: "MOCK/v1", api_key_env: CHECK_OPENAI_KEY}
  - {id: ant, type: anthropic, base_url: "MOCK", api_key_env: CHECK_ANTHROPIC_KEY}
  - {id: gem, type: gemini, base_url: "MOCK", api_key_env: CHECK_GEMINI_KEY}
  - {id: vx, type: vertex, project: oncegate-mock, location: us-east5, publisher: google, base_url: "MOCK", credentials_file_env: CHECK_SA_FILE}
  - {id: az, type: azure-openai, base_url: "MOCK", api_version: "2024-10-21", api_key_env: CHECK_AZURE_KEY}
  - {id: aws, type: bedrock, region: us-east-1, base_url: "MOCK"}
  - {id: vllm, type: openai, base_url: "VLLM/v1"}
routes:
  - {id: oai, provider: oai, model: gpt-4o, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: ant, provider: ant, model: claude-sonnet-4-5, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: gem, provider: gem, model: gemini-2.5-flash, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: vx, provider: vx, model: gemini-2.5-pro, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: az, provider: az, model: gpt-4o-deployment, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: aws, provider: aws, model: "anthropic.claude-3-5-haiku-20241022-v1:0", behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
  - {id: local, provider: vllm, model: llama-local, behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
models: [{name: chat, routes: [oai, ant, gem, vx, az, aws, local]}]
`

// check --connect asks each route's provider whether the route's model
// exists — OpenAI's and Anthropic's GET /v1/models/{id}, the Gemini API's
// GET /v1beta/models/{model}, Vertex AI's publisher model, a vLLM-like
// server's list — says where it cannot ask (Azure, Bedrock) and why, and
// fails for a model the provider says it does not have.
func TestCheckConnectAsksWhetherEachRoutesModelExists(t *testing.T) {
	m := mock.New(mock.Config{})
	defer m.Close()
	srv := httptest.NewServer(m)
	defer srv.Close()
	served := "llama-local"
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" && r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"` + served + `","object":"model","owned_by":"vllm"}]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	}))
	defer vllm.Close()
	dir := awsOnly(t)
	sa := filepath.Join(dir, "sa.json")
	if err := os.WriteFile(sa, mock.ServiceAccountJSON(srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"CHECK_TENANT_KEY": "sk-tenant-check", "CHECK_OPENAI_KEY": "sk-openai-check", "CHECK_ANTHROPIC_KEY": "sk-ant-check",
		"CHECK_GEMINI_KEY": mock.DefaultGeminiAPIKey, "CHECK_SA_FILE": sa, "CHECK_AZURE_KEY": mock.DefaultAzureAPIKey,
		"AWS_ACCESS_KEY_ID": mock.DefaultAWS.AccessKeyID, "AWS_SECRET_ACCESS_KEY": mock.DefaultAWS.SecretAccessKey} {
		t.Setenv(k, v)
	}
	path := writeConfig(t, strings.NewReplacer("MOCK", srv.URL, "VLLM", vllm.URL).Replace(modelsCheckConfig))

	code, out, errOut := runCLI("check", "--connect", "--config", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`route oai (openai "gpt-4o" on oai): "gpt-4o" exists at the provider`,
		`route ant (anthropic "claude-sonnet-4-5" on ant): "claude-sonnet-4-5" exists at the provider`,
		`route gem (gemini "gemini-2.5-flash" on gem): "gemini-2.5-flash" exists at the provider`,
		`route vx (vertex "gemini-2.5-pro" on vx): "gemini-2.5-pro" exists at the provider`,
		`route local (openai "llama-local" on vllm): "llama-local" is in the provider's list of models`,
		`route az (azure-openai "gpt-4o-deployment" on az): not asked: Azure lists a resource's deployments only through Azure Resource Manager`,
		`route aws (bedrock "anthropic.claude-3-5-haiku-20241022-v1:0" on aws): not asked: Bedrock's model lookups (GetFoundationModel, GetInferenceProfile) are on its control plane`,
		"configuration OK",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := m.ModelLookups(); n != 4 {
		t.Errorf("the mock saw %d model lookups, want 4", n)
	}

	// Models the providers do not have fail the check, each named.
	m.SetScript(mock.Script{Rules: []mock.Rule{
		{Model: "gpt-4o", Fault: mock.Fault{Type: mock.FaultModelNotFound}},
		{Model: "claude-sonnet-4-5", Fault: mock.Fault{Type: mock.FaultModelNotFound}},
		{Model: "gemini-2.5-flash", Fault: mock.Fault{Type: mock.FaultModelNotFound}},
		{Model: "gemini-2.5-pro", Fault: mock.Fault{Type: mock.FaultModelNotFound}},
	}})
	served = "another-model"
	code, out, errOut = runCLI("check", "--connect", "--config", path)
	if code != 1 || strings.Contains(out, "configuration OK") {
		t.Fatalf("missing models: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		`route oai (openai "gpt-4o" on oai): the provider does not have "gpt-4o" (HTTP 404 model_not_found)`,
		`route ant (anthropic "claude-sonnet-4-5" on ant): the provider does not have "claude-sonnet-4-5" (HTTP 404 not_found_error)`,
		`route gem (gemini "gemini-2.5-flash" on gem): the provider does not have "gemini-2.5-flash" (HTTP 404 NOT_FOUND)`,
		`route vx (vertex "gemini-2.5-pro" on vx): the provider does not have "gemini-2.5-pro" (HTTP 404 NOT_FOUND)`,
		`route local (openai "llama-local" on vllm): "llama-local" is not in the provider's list of models`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("errors lack %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out+errOut, mock.DefaultGeminiAPIKey) || strings.Contains(out+errOut, "sk-openai-check") {
		t.Fatal("a secret was printed")
	}
}
