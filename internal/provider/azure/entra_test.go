package azure

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// entraMock serves the mock over TLS (azidentity requires an HTTPS
// authority) and returns the authority a provider is opened with: its
// client reaches the mock and nothing else.
func entraMock(t *testing.T, cfg mock.EntraConfig) (*mock.Mock, *provider.TokenAuthority) {
	t.Helper()
	m := mock.New(mock.Config{Entra: cfg})
	srv := httptest.NewTLSServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(m.Close)
	return m, &provider.TokenAuthority{URL: srv.URL, Client: mock.OnlyTo(srv.Client(), srv.URL)}
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// openEntraWith opens an auth: entra provider with env as its
// environment.
func openEntraWith(t *testing.T, p config.Provider, env map[string]string, a *provider.TokenAuthority) (*entraAuth, error) {
	t.Helper()
	p.Type, p.BaseURL, p.Auth = "azure-openai", "https://r.openai.azure.com", AuthEntra
	ep, err := OpenAI.Open(provider.Config{Provider: &p, Lookup: lookupIn(env), Authority: a})
	if err != nil {
		return nil, err
	}
	return ep.Auth().(*entraAuth), nil
}

// secretEnv is the environment of an app registration's client secret.
func secretEnv(secret string) map[string]string {
	return map[string]string{envTenantID: mock.DefaultEntraTenant, envClientID: mock.DefaultEntraClient, envSecret: secret,
		envSelect: "prod"} // never the developer's own az login
}

// Each source of the chain obtains a token from the mock's Entra ID, and
// the auth names the one that answered: a client secret, a certificate,
// a workload identity's federated token.
func TestEntraSourcesObtainTokens(t *testing.T) {
	t.Parallel()
	cert, pemFile := testCertificate(t)
	fedFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(fedFile, []byte("federated-k8s-token-9f1c"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, auth := entraMock(t, mock.EntraConfig{Certificate: cert, FederatedToken: "federated-k8s-token-9f1c"})
	ids := map[string]string{envTenantID: mock.DefaultEntraTenant, envClientID: mock.DefaultEntraClient, envSelect: "prod"}
	with := func(k, v string) map[string]string {
		env := map[string]string{k: v}
		for k, v := range ids {
			env[k] = v
		}
		return env
	}
	for i, c := range []struct {
		name string
		env  map[string]string
		cfg  config.Provider
		want string
	}{
		{"secret", secretEnv(mock.DefaultEntraSecret), config.Provider{}, "ClientSecretCredential (client " + mock.DefaultEntraClient},
		{"ids from the configuration", map[string]string{envSecret: mock.DefaultEntraSecret, envSelect: "prod"},
			config.Provider{TenantID: mock.DefaultEntraTenant, ClientID: mock.DefaultEntraClient}, "ClientSecretCredential (client " + mock.DefaultEntraClient + ", tenant " + mock.DefaultEntraTenant},
		{"certificate", with(envCertPath, pemFile), config.Provider{}, "ClientCertificateCredential (client " + mock.DefaultEntraClient},
		{"workload identity", with(envTokenFile, fedFile), config.Provider{}, "WorkloadIdentityCredential (client " + mock.DefaultEntraClient},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := openEntraWith(t, c.cfg, c.env, auth)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, "https://r.openai.azure.com/openai/v1/chat/completions", nil)
			req.Header.Set("api-key", "stale")
			if err := a.Authenticate(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer eyJ") || req.Header.Get("api-key") != "" {
				t.Fatalf("headers %v", req.Header)
			}
			if d := a.Describe(); !strings.Contains(d, c.want) || strings.Contains(d, mock.DefaultEntraSecret) {
				t.Fatalf("Describe %q, want %q", d, c.want)
			}
			if n := m.EntraTokensIssued(); n != i+1 {
				t.Fatalf("%d tokens issued, want %d", n, i+1)
			}
		})
	}
}

// A refused credential — a wrong secret, an unknown application or
// tenant — refuses the route's account, named by the source and Entra's
// code and never by a secret; a chain with no source that has a
// credential is refused too, saying what each lacked.
func TestEntraRefusals(t *testing.T) {
	t.Parallel()
	_, auth := entraMock(t, mock.EntraConfig{})
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"wrong secret", secretEnv("wrong-secret-4d2e"), "ClientSecretCredential (HTTP 401 invalid_client AADSTS7000215)"},
		{"unknown client", map[string]string{envTenantID: mock.DefaultEntraTenant, envClientID: "11111111-2222-3333-4444-555555555555", envSecret: mock.DefaultEntraSecret, envSelect: "prod"},
			"ClientSecretCredential (HTTP 400 unauthorized_client AADSTS700016)"},
		{"unknown tenant", map[string]string{envTenantID: "99999999-0000-4000-8000-000000000000", envClientID: mock.DefaultEntraClient, envSecret: mock.DefaultEntraSecret, envSelect: "prod"},
			"ClientSecretCredential (HTTP 400 invalid_tenant AADSTS90002)"},
		{"no credential", map[string]string{envSelect: "prod"}, "no credential for Microsoft Entra ID: no source of the chain has one (ManagedIdentityCredential: no managed identity endpoint answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := openEntraWith(t, config.Provider{}, c.env, auth)
			if err != nil {
				t.Fatal(err)
			}
			err = a.Ready(context.Background())
			if !errors.Is(err, gw.ErrCredentialRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), mock.DefaultEntraSecret) || strings.Contains(err.Error(), "wrong-secret") || strings.Contains(err.Error(), "Trace ID") {
				t.Fatalf("the error says too much: %v", err)
			}
		})
	}
}

// An unreachable authority is not a refusal: the route is unavailable for
// now, and the error names no secret.
func TestEntraUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	_, auth := entraMock(t, mock.EntraConfig{})
	down := &provider.TokenAuthority{URL: "https://127.0.0.1:1", Client: auth.Client}
	a, err := openEntraWith(t, config.Provider{}, secretEnv(mock.DefaultEntraSecret), down)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Ready(ctx)
	if err == nil || errors.Is(err, gw.ErrCredentialRefused) || strings.Contains(err.Error(), mock.DefaultEntraSecret) {
		t.Fatalf("error %v", err)
	}
}

// The configuration's mistakes are named before any token is asked for.
func TestEntraOpenErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"secret without tenant", map[string]string{envSecret: "s", envClientID: "c"}, "AZURE_CLIENT_SECRET is set but no tenant is: set tenant_id or AZURE_TENANT_ID"},
		{"certificate file missing", map[string]string{envCertPath: "/nonexistent/cert.pem", envClientID: "c", envTenantID: "t"}, "AZURE_CLIENT_CERTIFICATE_PATH /nonexistent/cert.pem: no such file"},
		{"unknown selection", map[string]string{envSelect: "everything"}, `AZURE_TOKEN_CREDENTIALS="everything": want prod, dev`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openEntraWith(t, config.Provider{}, c.env, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	_, err := OpenAI.Open(provider.Config{Provider: &config.Provider{BaseURL: "https://r", Auth: "oauth"}})
	var ce *provider.ConfigError
	if !errors.As(err, &ce) || ce.Key != "auth" || !strings.Contains(err.Error(), `unknown value "oauth" (want key or entra)`) {
		t.Fatalf("unknown auth: %v", err)
	}
}

// Each auth has its keys: entra takes tenant_id and client_id and no
// key; key takes api_key_env or api_key_file and neither id.
func TestSpecPerAuth(t *testing.T) {
	t.Parallel()
	pc := OpenAI.(provider.PerConfig)
	key := pc.For(&config.Provider{}).Spec()
	entra := pc.For(&config.Provider{Auth: AuthEntra}).Spec()
	has := func(s []string, k string) bool {
		for _, x := range s {
			if x == k {
				return true
			}
		}
		return false
	}
	if !has(key.Required, "api_key_env|api_key_file") || has(key.Allowed, "tenant_id") || !has(key.Allowed, "auth") {
		t.Errorf("key: %+v", key)
	}
	if has(entra.Allowed, "api_key_env") || has(entra.Allowed, "api_key_file") || !has(entra.Allowed, "client_id") || len(entra.Required) != 1 || entra.Variant != "auth: entra" {
		t.Errorf("entra: %+v", entra)
	}
}

// testCertificate makes a self-signed certificate and writes it with its
// private key as PEM, as AZURE_CLIENT_CERTIFICATE_PATH names one.
func testCertificate(t *testing.T) (*x509.Certificate, string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oncegate-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.pem")
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, path
}
