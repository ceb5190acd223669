package litellm

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"
)

func noEnv(string) (string, bool) { return "", false }

// errorNamesWhere: every error names the file, and a key or a position.
var errorNamesWhere = regexp.MustCompile(`^lite\.yaml(:\d+:\d+)?: \S`)

// FuzzImportLiteLLM: no input makes the import panic; every refusal
// names the file and what was wrong; every translation is YAML.
func FuzzImportLiteLLM(f *testing.F) {
	seeds, _ := filepath.Glob("../../cmd/oncegate/testdata/litellm/*.yaml")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"model_list: []", "model_list: [{model_name: a, litellm_params: {model: azure/x}}]",
		"model_list: [{model_name: a, litellm_params: {model: hosted_vllm/m, api_base: 'http://[::1]:8/v1'}}]\nrouter_settings: {fallbacks: [{a: [a, b]}], num_retries: -1}",
		"a: &x [*x]", "model_list:\n  - &d {model_name: a, litellm_params: {model: gpt-4o}}\n  - *d\n",
		"model_list: [{model_name: a, litellm_params: {<<: {model: gpt-4o}}}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("lite.yaml", data)
		if err != nil {
			if !errorNamesWhere.MatchString(err.Error()) || !IsError(err) {
				t.Fatalf("an error that does not say where: %q", err)
			}
			return
		}
		res, err := Translate(c, noEnv)
		if err != nil {
			if !errorNamesWhere.MatchString(err.Error()) {
				t.Fatalf("an error that does not say where: %q", err)
			}
			return
		}
		var out map[string]any
		if err := yaml.Unmarshal([]byte(res.YAML), &out); err != nil {
			t.Fatalf("the translation is not YAML: %v\n%s", err, res.YAML)
		}
		for _, k := range []string{"tenants", "providers", "routes", "models"} {
			if out[k] == nil {
				t.Fatalf("the translation has no %s:\n%s", k, res.YAML)
			}
		}
	})
}

// A host's name says where its data goes.
func TestHostBoundary(t *testing.T) {
	for host, want := range map[string]string{
		"http://localhost:8000/v1": "local", "http://127.0.0.1:8000/v1": "local", "http://[::1]:8000": "local",
		"http://10.0.3.4:8000/v1": "private", "http://vllm:8000/v1": "private", "http://vllm.ml.svc.cluster.local/v1": "private",
		"https://api.together.xyz/v1": "external", "http://8.8.8.8/v1": "external",
	} {
		if got, _ := hostBoundary(host, "external", ""); got != want {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
}

// A model's family comes from the catalogue, else from its name.
func TestFamilyOf(t *testing.T) {
	for model, want := range map[string]string{
		"gpt-4o": "openai", "anthropic.claude-sonnet-4-5-20250929-v1:0": "anthropic", "meta-llama/Llama-3.3-70B-Instruct": "meta",
		"gemini-2.5-pro": "google", "Qwen/Qwen2.5-72B": "qwen", "my-own-model": "my-own-model",
	} {
		if got := familyOf(model); got != want {
			t.Errorf("%s: %s, want %s", model, got, want)
		}
	}
	if q("a: b") != `"a: b"` || q("true") != `"true"` || q("gpt-4o") != "gpt-4o" {
		t.Errorf("quoting: %s %s %s", q("a: b"), q("true"), q("gpt-4o"))
	}
}
