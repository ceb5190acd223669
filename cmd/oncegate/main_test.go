package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckExample(t *testing.T) {
	code, out, errOut := runCLI("check", "--config", "../../examples/oncegate.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"model chat ", "model chat-private ", "PRIORITY", "external-fallback", "configuration OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`policy sha256 [0-9a-f]{64}`).FindAllString(out, -1)); n != 3 {
		t.Errorf("want 3 digests (two aliases and the whole policy), got %d", n)
	}
}

func TestCheckInvalidNamesEveryViolation(t *testing.T) {
	code, _, errOut := runCLI("check", "--config", "../../examples/invalid.yaml")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	positioned := regexp.MustCompile(`(?m)^  \.\./\.\./examples/invalid\.yaml:\d+:\d+: `).FindAllString(errOut, -1)
	if len(positioned) < 6 {
		t.Fatalf("want ≥ 6 violations with file positions, got %d:\n%s", len(positioned), errOut)
	}
}

func TestVerifyReference(t *testing.T) {
	code, out, errOut := runCLI("verify", "--config", "../../examples/oncegate.yaml", "../../examples/receipts/reference.json")
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestVerifyMutationsExitOneNamingTheDrift(t *testing.T) {
	files, err := filepath.Glob("../../internal/receipt/testdata/mutations/*.json")
	if err != nil || len(files) < 13 {
		t.Fatalf("mutations: %v %v", files, err)
	}
	names := map[string]string{
		"opaque_retry_owner": "opaque_retry_owner", "contract_drift": "contract_drift", "boundary_drift": "boundary_drift",
		"logical_request_drift": "logical_request_drift", "premature_fallback": "route_out_of_order",
		"non_retryable_retried": "non_retryable_retried", "indeterminate_retried": "indeterminate_retried",
		"attempt_budget": "attempt_budget_exceeded", "cost_budget": "cost_budget_exceeded", "deadline": "deadline_exceeded",
		"route_exhaustion": "routes_exhausted", "tampered_digest": "digest_mismatch",
		"recovery_stop_then_attempt": "decision_mismatch", "recovery_stop_wrong_terminal": "wrong_terminal",
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			code, out, _ := runCLI("verify", "--config", "../../examples/oncegate.yaml", f)
			if name == "valid_success" || name == "recovery_stop" {
				if code != 0 {
					t.Fatalf("valid receipt: exit %d\n%s", code, out)
				}
				return
			}
			if code != 1 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, names[name]+":") {
				t.Fatalf("exit %d, want 1 naming %s:\n%s", code, names[name], out)
			}
		})
	}
}

func TestVerifyRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"request_id": "x", "surprise": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("verify", "--config", "../../examples/oncegate.yaml", bad); code != 1 || !strings.Contains(errOut, "unknown field") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, _ := runCLI("verify", "--config", "../../examples/oncegate.yaml", filepath.Join(dir, "missing.json")); code != 1 {
		t.Fatalf("missing file: exit %d", code)
	}
}

func TestUsage(t *testing.T) {
	if code, out, _ := runCLI(); code != 0 || !strings.Contains(out, "usage") {
		t.Fatalf("no args: %d %q", code, out)
	}
	if code, _, errOut := runCLI("frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("unknown verb: %d %q", code, errOut)
	}
	if code, _, _ := runCLI("check"); code != 2 {
		t.Fatalf("check without --config: %d", code)
	}
}

// Every verb's -h names its arguments and what it reads from the
// environment, and exits 0; version prints how the binary was built.
func TestEveryVerbExplainsItself(t *testing.T) {
	for verb := range verbs {
		code, _, errOut := runCLI(verb, "-h")
		if code != 0 || !strings.Contains(errOut, "usage: oncegate "+verb) {
			t.Fatalf("%s -h: exit %d\n%s", verb, code, errOut)
		}
		if (verb == "serve" || verb == "check") && !strings.Contains(errOut, "environment:") {
			t.Fatalf("%s -h names no environment variables:\n%s", verb, errOut)
		}
		if verb == "serve" && (!strings.Contains(errOut, "SIGHUP re-reads the configuration") || !strings.Contains(errOut, "-metrics-listen")) {
			t.Fatalf("serve -h does not say how to reload, or lacks --metrics-listen:\n%s", errOut)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "oncegate ") || !strings.Contains(out, "go1.") {
			t.Fatalf("%v: exit %d %q", args, code, out)
		}
	}
}

// A secret named twice — a variable and a file — is refused by check with
// its position; a secret file check cannot read is listed with its
// position, for serve will need it.
func TestCheckHoldsSecretsToOneSource(t *testing.T) {
	raw, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example's own admin key goes: this test names one twice.
	var kept []string
	for _, l := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(l, "admin_key_env:") {
			kept = append(kept, l)
		}
	}
	example := strings.Join(kept, "\n")
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	both := "admin_key_env: ONCEGATE_ADMIN\nadmin_key_file: admin.key\n" + string(example)
	if err := os.WriteFile(path, []byte(both), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("check", "--config", path)
	if code != 1 || !strings.Contains(errOut, path+":2:17: admin_key_file: set admin_key_env or admin_key_file, not both") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if err := os.WriteFile(path, []byte("admin_key_file: admin.key\n"+string(example)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("check", "--config", path)
	if code != 0 || !strings.Contains(out, path+":1:17: admin_key_file: secret file "+filepath.Join(dir, "admin.key")+": no such file") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
}
