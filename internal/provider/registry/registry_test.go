package registry

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/provider"
)

// Every registered type declares keys the configuration has, requires
// only keys it allows, and opens a provider written with its required
// keys (docs/providers.md).
func TestEveryTypeKeepsTheSeamsRules(t *testing.T) {
	keys := Keys()
	for _, name := range Names() {
		typ, _ := Lookup(name)
		spec := typ.Spec()
		if spec.Protocol == "" {
			t.Errorf("%s: no protocol", name)
		}
		for _, k := range spec.Allowed {
			if !slices.Contains(keys, k) {
				t.Errorf("%s allows %q, which config.Provider has no field for", name, k)
			}
		}
		for _, req := range spec.Required {
			for _, k := range Alternatives(req) {
				if !slices.Contains(spec.Allowed, k) {
					t.Errorf("%s requires %q but does not allow it", name, k)
				}
			}
		}
		for _, c := range spec.Continuations {
			if c != provider.ContinuePrefill && c != provider.ContinuePrefix && c != provider.ContinueFinalMsg {
				t.Errorf("%s: unknown continuation %q", name, c)
			}
		}
		p := &config.Provider{ID: "p", Type: name, BaseURL: "https://example.test", Region: "us-east-1", Project: "proj",
			Location: "us-east5", Publisher: "google", APIKeyEnv: "KEY"}
		key := "secret-key"
		if name == "vertex" {
			key = serviceAccountKey(t) // its key is a service account's JSON key file
		}
		ep, err := Open(provider.Config{Provider: p, APIKey: key, Lookup: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Errorf("%s: open: %v", name, err)
			continue
		}
		if ep.BaseURL() == "" {
			t.Errorf("%s: no base URL", name)
		}
		if a := ep.Auth(); a != nil && a.Describe() == "" {
			t.Errorf("%s: its auth does not say what it uses", name)
		}
	}
	if _, err := Open(provider.Config{Provider: &config.Provider{Type: "cohere"}}); err == nil {
		t.Error("an unknown type opens")
	}
}

// serviceAccountKey is a service-account key file's JSON with a fresh key.
func serviceAccountKey(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": "https://oauth2.example.test/token"})
	return string(b)
}
