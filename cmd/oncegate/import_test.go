package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/receipt"
)

// importAndCheck imports a LiteLLM config with env set, writes the
// output beside a fresh directory and runs check on it; it returns the
// output and its path.
func importAndCheck(t *testing.T, file string, env map[string]string) (string, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	code, out, errOut := runCLI("import", "litellm", filepath.Join("testdata", "litellm", file))
	if code != 0 {
		t.Fatalf("import %s: exit %d\n%s", file, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "oncegate.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	code, checked, errOut := runCLI("check", "--config", path)
	if code != 0 || !strings.Contains(checked, "configuration OK") || strings.Contains(checked, "cannot be read here") {
		t.Fatalf("check of the import of %s: exit %d\n%s\n%s\nimported:\n%s", file, code, errOut, checked, out)
	}
	return out, path
}

// Every shape of LiteLLM config translates into one that check accepts
// with the same environment, each LiteLLM setting where it belongs.
func TestImportLiteLLMPassesCheck(t *testing.T) {
	sa := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(sa, mock.ServiceAccountJSON("http://127.0.0.1:1"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		env  map[string]string
		want []string
		not  []string
	}{
		{"issue.yaml", map[string]string{"AZURE_API_KEY_EAST": "k1", "AZURE_API_KEY_SWEDEN": "k2", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s", "LITELLM_MASTER_KEY": "sk-master"},
			[]string{
				"admin_key_env: LITELLM_MASTER_KEY", "admin_tenant: default", "drop_params: true", "breaker: {open_for: 30s}",
				"type: azure-openai", `base_url: "https://acme-eastus.openai.azure.com/"`, "api_key_env: AZURE_API_KEY_EAST", "api_key_env: AZURE_API_KEY_SWEDEN",
				"type: bedrock\n    region: us-east-1",
				`base_url: "http://vllm-0.inference.svc:8000/v1"`, "data_boundary: private   # an internal host name",
				"routes: [[gpt-4o-azure-acme-eastus, gpt-4o-azure-acme-sweden], gpt-4o-fallback-claude-sonnet-bedrock-us-east-1]",
				"routes: [[llama-vllm-0, llama-vllm-1]]", "strategy: least_busy",
				"retry: {max_attempts: 4, deadline: 45s}", "retry: {max_attempts: 3, deadline: 45s}", "max_attempts: 3\n",
				"behavior_class: gpt-4o.openai+anthropic", "behavior_class: llama.meta", "stream: {resume_routes: same}",
				"price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}   # the catalogue's price of base_model gpt-4o",
				"continuation: continue_final_message", "continuation: assistant_prefill",
				"router_settings.allowed_fails: 3", "general_settings.database_url", "litellm_settings.success_callback",
			},
			[]string{"request_timeout"}},
		{"simple.yaml", map[string]string{"OPENAI_API_KEY": "sk-openai", "ANTHROPIC_API_KEY": "sk-ant", "LITELLM_MASTER_KEY": "sk-master"},
			[]string{
				"type: openai\n    base_url: \"https://api.openai.com/v1\"\n    api_key_env: OPENAI_API_KEY",
				"model_list[0].litellm_params.api_key (testdata/litellm/simple.yaml:7) held the key itself",
				"general_settings.master_key (testdata/litellm/simple.yaml:13) held the key itself",
				"type: anthropic\n    base_url: \"https://api.anthropic.com\"\n    api_key_env: ANTHROPIC_API_KEY",
				"routes: [gpt-4o-mini-openai]", "behavior_class: claude.anthropic",
			},
			[]string{"sk-written-in-the-file", "sk-1234", "strategy:", "drop_params"}},
		{"clouds.yaml", map[string]string{"VERTEX_SA_FILE": sa, "GEMINI_API_KEY": "g", "AZURE_API_KEY": "a", "AZURE_API_BASE": "https://acme-prod.openai.azure.com", "ONCEGATE_KEY_DEFAULT": "sk-default"},
			[]string{
				"type: vertex\n    project: acme-ml\n    location: us-central1\n    publisher: google\n    credentials_file_env: VERTEX_SA_FILE",
				"publisher: anthropic", "type: gemini",
				`base_url: "https://acme-prod.openai.azure.com"`, "api_base from AZURE_API_BASE at import", `api_version: "2025-01-01-preview"`,
				"routes: [[gemini-pro-vertex-us-central1, gemini-pro-gemini], gemini-pro-fallback-claude-vertex-vertex-europe-west1-anthropic]",
				"strategy: latency", "data_boundary: local", "price: {input_usd_per_mtok: 0.1, output_usd_per_mtok: 0.2}",
				`model_list[5] ("openai/*"): wildcard`, "model_list[6] (openai/dall-e-3, mode image_generation): not translated",
				"router_settings.redis_host", "litellm_settings.cache", "environment_variables: not translated", "retry: {max_attempts: 3}", "serve reads these environment variables: VERTEX_SA_FILE, GEMINI_API_KEY, AZURE_API_KEY, ONCEGATE_KEY_DEFAULT",
			},
			[]string{"claude-vertex-fallback"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			out, _ := importAndCheck(t, c.file, c.env)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range c.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q", w)
				}
			}
			if t.Failed() {
				t.Log(out)
			}
		})
	}
}

// What cannot be translated exits 1 naming the file, the position and
// the key; a usage mistake exits 2.
func TestImportLiteLLMNamesWhatIsWrong(t *testing.T) {
	t.Setenv("AZURE_API_BASE", "")
	for _, c := range []struct{ src, want string }{
		{"model_list: {a: 1}\n", "lite.yaml:1:13: model_list: want a list of deployments, found a mapping"},
		{"model_list:\n  - litellm_params: {model: gpt-4o}\n", "lite.yaml:2:5: model_list[0].model_name: missing"},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: [a]}\n", "lite.yaml:3:29: model_list[0].litellm_params.model: want a string, found a list"},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: azure/d, api_base: os.environ/AZURE_API_BASE}\n",
			"lite.yaml:3:48: model_list[0].litellm_params.api_base: os.environ/AZURE_API_BASE: the variable is not set"},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: gpt-4o}\nrouter_settings:\n  fallbacks: {x: y}\n",
			"lite.yaml:5:14: router_settings.fallbacks: want a list of {group: [fallback groups]}"},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: gpt-4o}\nrouter_settings:\n  num_retries: lots\n",
			`lite.yaml:5:16: router_settings.num_retries: want a number, found "lots"`},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: replicate/meta/llama}\n", "model_list: no deployment could be translated: model_list[0] (replicate/meta/llama): not translated: provider \"replicate\" has no oncegate type"},
		{"model_list: [\n", "lite.yaml: not YAML"},
		{"model_list:\n  - model_name: x\n    litellm_params: {model: gpt-4o, api_key: 'os.environ/\"'}\n",
			`lite.yaml:3:46: model_list[0].litellm_params.api_key: os.environ/": want a variable's name`},
	} {
		path := filepath.Join(t.TempDir(), "lite.yaml")
		if err := os.WriteFile(path, []byte(c.src), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI("import", "litellm", path)
		if code != 1 || out != "" || !strings.Contains(errOut, strings.Replace(c.want, "lite.yaml", path, 1)) {
			t.Errorf("%q: exit %d, want %q in\n%s", c.src, code, c.want, errOut)
		}
	}
	for _, args := range [][]string{{"import"}, {"import", "kong", "x.yaml"}, {"import", "litellm"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// The config, imported and pointed at the mock, serves: the
// master key calls gpt-4o as tenant default; with both Azure regions
// failing, LiteLLM's fallback to Claude on Bedrock answers; the receipt
// lists every attempt the mock counted, and the master key reads it.
func TestImportedLiteLLMConfigServes(t *testing.T) {
	awsOnly(t)
	m := mock.New(mock.Config{})
	defer m.Close()
	srv := httptest.NewServer(m)
	defer srv.Close()
	m.SetScript(mock.Script{Rules: []mock.Rule{
		{Model: "gpt-4o-eastus", Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}},
		{Model: "gpt-4o-swedencentral", Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}},
	}})
	out, _ := importAndCheck(t, "issue.yaml", map[string]string{
		"AZURE_API_KEY_EAST": mock.DefaultAzureAPIKey, "AZURE_API_KEY_SWEDEN": mock.DefaultAzureAPIKey,
		"AWS_ACCESS_KEY_ID": mock.DefaultAWS.AccessKeyID, "AWS_SECRET_ACCESS_KEY": mock.DefaultAWS.SecretAccessKey,
		"LITELLM_MASTER_KEY": "sk-litellm-master",
	})
	// Every provider to the mock: the endpoints, and Bedrock's override.
	out = regexp.MustCompile(`base_url: "https?://[^"]*?(/v1)?/?"`).ReplaceAllString(out, `base_url: "`+srv.URL+`$1"`)
	out = strings.Replace(out, "store: sqlite://oncegate.db", `store: "memory://"`, 1)
	out = strings.Replace(out, "region: us-east-1\n", "region: us-east-1\n    base_url: \""+srv.URL+"\"\n", 1)
	path := filepath.Join(t.TempDir(), "oncegate.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, path).url

	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-litellm-master"))
	var resp *http.Response
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("chat completion: %v", err)
	}
	id := resp.Header.Get("X-Oncegate-Request-Id")
	req, _ := http.NewRequest("GET", base+"/v1/receipts/"+id, nil)
	req.Header.Set("Authorization", "Bearer sk-litellm-master")
	got, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Body.Close()
	var rc receipt.Receipt
	if err := json.NewDecoder(got.Body).Decode(&rc); err != nil || got.StatusCode != 200 {
		t.Fatalf("receipt %s: %d %v", id, got.StatusCode, err)
	}
	stats := m.Stats()
	last := rc.Attempts[len(rc.Attempts)-1]
	if rc.Tenant != "default" || rc.Terminal != "succeeded" || last.Route != "gpt-4o-fallback-claude-sonnet-bedrock-us-east-1" {
		t.Fatalf("receipt: tenant %q, terminal %q, last route %q", rc.Tenant, rc.Terminal, last.Route)
	}
	if n := int64(len(rc.Attempts)); n != stats.Requests || n != stats.ByRequestID[id].Requests {
		t.Fatalf("the receipt lists %d attempts, the mock counted %d (%d for the request)", n, stats.Requests, stats.ByRequestID[id].Requests)
	}
	claude := stats.ByModel["anthropic.claude-sonnet-4-5-20250929-v1:0"]
	if claude.Requests != 1 || claude.OutputTokens != last.Usage.OutputTokens {
		t.Fatalf("bedrock: %d requests, %d output tokens; the receipt bills %d", claude.Requests, claude.OutputTokens, last.Usage.OutputTokens)
	}
	// Both Azure regions were tried before the fallback, each within its cap.
	for _, dep := range []string{"gpt-4o-eastus", "gpt-4o-swedencentral"} {
		if n := stats.ByModel[dep].Requests; n < 1 || n > 3 {
			t.Errorf("%s: %d requests, want 1 to 3 (max_attempts 3)", dep, n)
		}
	}
}
