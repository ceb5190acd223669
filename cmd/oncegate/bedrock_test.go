package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const bedrockCheckConfig = `
store: "memory://"
tenants: [{id: acme, api_key_env: CHECK_TENANT_KEY}]
providers:
  - {id: aws-east, type: bedrock, region: us-east-1}
routes:
  - {id: east, provider: aws-east, model: "us.anthropic.claude-3-5-haiku-20241022-v1:0", behavior_class: c, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}}
models: [{name: chat, routes: [east]}]
`

// awsOnly leaves the AWS default chain only what the test sets.
func awsOnly(t *testing.T) string {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return dir
}

// check --connect obtains a credential from the AWS chain for a bedrock
// provider and names its source, never the secret; without credentials
// it fails; a bedrock without region, or with a profile that does not
// exist, is refused.
func TestCheckBedrock(t *testing.T) {
	dir := awsOnly(t)
	t.Setenv("CHECK_TENANT_KEY", "sk-tenant-check")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDCHECK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-check-5511")
	path := writeConfig(t, bedrockCheckConfig)
	code, out, errOut := runCLI("check", "--connect", "--config", path)
	want := "provider aws-east (bedrock) at https://bedrock-runtime.us-east-1.amazonaws.com: SigV4 for bedrock in us-east-1 from the AWS default credential chain (EnvConfigCredentials)"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %q\n%s\n%s", code, want, out, errOut)
	}
	if strings.Contains(out+errOut, "aws-secret-check-5511") {
		t.Fatal("the secret was printed")
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if code, out, errOut := runCLI("check", "--connect", "--config", path); code != 1 || !strings.Contains(errOut, "provider aws-east (bedrock)") {
		t.Fatalf("no credentials: exit %d\n%s\n%s", code, out, errOut)
	}

	creds := "[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = team-secret-8181\n"
	if err := os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	path = writeConfig(t, strings.Replace(bedrockCheckConfig, "region: us-east-1}", "region: us-east-1, aws_profile: team}", 1))
	code, out, errOut = runCLI("check", "--connect", "--config", path)
	if code != 0 || !strings.Contains(out, "from AWS profile team (SharedConfigCredentials") || strings.Contains(out+errOut, "team-secret-8181") {
		t.Fatalf("profile: exit %d\n%s\n%s", code, out, errOut)
	}

	for _, c := range []struct{ from, to, want string }{
		{"region: us-east-1}", "base_url: \"https://x.example\"}", "provider type bedrock needs region"},
		{"region: us-east-1}", "region: us-east-1, aws_profile: nobody}", `aws_profile "nobody"`},
		{"region: us-east-1}", "region: us-east-1, api_version: v1}", `provider type bedrock has no key "api_version"`},
	} {
		path := writeConfig(t, strings.Replace(bedrockCheckConfig, c.from, c.to, 1))
		if code, out, errOut := runCLI("check", "--config", path); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, want %q\n%s\n%s", c.to, code, c.want, out, errOut)
		}
	}
}
