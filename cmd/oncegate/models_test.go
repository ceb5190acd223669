package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `oncegate models` lists the catalogue, as a table or JSON, by family;
// an unknown family is an error that names it.
func TestModelsListsTheCatalogue(t *testing.T) {
	code, out, errOut := runCLI("models")
	if code != 0 || !strings.Contains(out, "compiled ") || !strings.Contains(out, "gpt-4o-mini") || !strings.Contains(out, "claude-sonnet-4-5") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	code, out, _ = runCLI("models", "--json", "--family", "anthropic")
	var got struct {
		Compiled string `json:"compiled"`
		Models   []struct {
			Name   string  `json:"name"`
			Family string  `json:"family"`
			Input  float64 `json:"input_usd_per_mtok"`
		} `json:"models"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Compiled == "" || len(got.Models) == 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, m := range got.Models {
		if m.Family != "anthropic" || m.Input <= 0 {
			t.Fatalf("entry %+v", m)
		}
	}
	if code, _, errOut := runCLI("models", "--family", "nope"); code != 1 || !strings.Contains(errOut, `"nope"`) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// check prints the catalogue's warnings with their position: a route
// with neither a price nor a model the catalogue knows bills $0.
func TestCheckWarnsOfARouteThatBillsNothing(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	yaml := `tenants: [{id: acme, api_key_env: K}]
providers:
  - {id: p, type: openai, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {id: a, provider: p, model: my-finetune, behavior_class: c, data_boundary: private, max_attempts: 1, capabilities: {input: [text]}}
models:
  - {name: chat, routes: [a]}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "warning: "+cfg+":5:") || !strings.Contains(out, `model "my-finetune" is not in the model catalogue`) {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
}

// The cross-cloud example passes check, and the catalogue prices every
// route of it: no route bills $0.
func TestTheCrossCloudExampleIsPricedByTheCatalogue(t *testing.T) {
	code, out, errOut := runCLI("check", "--config", "../../examples/cross-cloud.yaml")
	if code != 0 || strings.Contains(out, "warning:") || !strings.Contains(out, "configuration OK") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	for _, want := range []string{"claude-bedrock", "claude-vertex", "gpt-azure-east", "gemini-vertex", "3/15", "0.15/0.6", "0.3/2.5"} {
		if !strings.Contains(out, want) {
			t.Fatalf("check's tables lack %q:\n%s", want, out)
		}
	}
}
