package azure

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/AzureAD/microsoft-authentication-library-for-go/apps/managedidentity"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// auth: entra (docs/providers.md): Azure OpenAI called with a Microsoft
// Entra ID access token, `Authorization: Bearer`, instead of a key.
// Tokens come from the Azure SDK for Go (azidentity), from the sources
// of its default credential chain, tried in its order until one answers:
//
//  1. the environment: an app registration's client secret
//     (AZURE_CLIENT_SECRET) or certificate (AZURE_CLIENT_CERTIFICATE_PATH,
//     with AZURE_CLIENT_CERTIFICATE_PASSWORD), with AZURE_TENANT_ID and
//     AZURE_CLIENT_ID;
//  2. workload identity (AZURE_FEDERATED_TOKEN_FILE, as the AKS webhook
//     sets it);
//  3. managed identity (App Service, Functions, Arc, or the VM's IMDS
//     endpoint);
//  4. the Azure CLI's signed-in account (`az account get-access-token`).
//
// The chain is built here, not by azidentity.NewDefaultAzureCredential,
// for three reasons: the variables are read through the provider's
// lookup (as every other credential of the configuration is), the
// configuration's tenant_id and client_id apply to every source, and each
// source is wrapped so that `oncegate check --connect` can say which one
// answered — DefaultAzureCredential does not tell.

// Scope is the scope of an Azure OpenAI (Cognitive Services) token.
const Scope = "https://cognitiveservices.azure.com/.default"

// The environment variables the chain reads (the Azure SDKs' names).
const (
	envTenantID     = "AZURE_TENANT_ID"
	envClientID     = "AZURE_CLIENT_ID"
	envSecret       = "AZURE_CLIENT_SECRET"
	envCertPath     = "AZURE_CLIENT_CERTIFICATE_PATH"
	envCertPassword = "AZURE_CLIENT_CERTIFICATE_PASSWORD"
	envSendChain    = "AZURE_CLIENT_SEND_CERTIFICATE_CHAIN"
	envTokenFile    = "AZURE_FEDERATED_TOKEN_FILE"
	envAuthority    = "AZURE_AUTHORITY_HOST"
	envSelect       = "AZURE_TOKEN_CREDENTIALS"
)

// The sources' names: azidentity's credential types.
const (
	credSecret   = "ClientSecretCredential"
	credCert     = "ClientCertificateCredential"
	credWorkload = "WorkloadIdentityCredential"
	credManaged  = "ManagedIdentityCredential"
	credCLI      = "AzureCLICredential"
)

// ErrTokenRefused is wrapped by a token error when Microsoft Entra ID
// answered and refused the credential (a wrong or expired secret, an
// unknown application or tenant); ErrNoCredential when no source of the
// chain has a credential at all. Either refuses the route's account:
// both match gw.ErrCredentialRefused, which the gateway's transport
// classifies as account_refused (upstream_auth_failed).
var (
	ErrTokenRefused error = refusal("azure: Microsoft Entra ID refused the credential")
	ErrNoCredential error = refusal("azure: no credential for Microsoft Entra ID")
)

// refusal is a refused credential: it is gw.ErrCredentialRefused, in its
// own words.
type refusal string

func (r refusal) Error() string { return string(r) }

// Is makes errors.Is(err, gw.ErrCredentialRefused) hold.
func (refusal) Is(target error) bool { return target == gw.ErrCredentialRefused }

// maxCertBytes bounds a certificate file.
const maxCertBytes = 64 << 10

// imdsURL is where a VM's managed identity answers; imdsProbeTime bounds
// the check that something does (DefaultAzureCredential's own probe).
const (
	imdsURL       = "http://169.254.169.254/metadata/identity/oauth2/token"
	imdsProbeTime = time.Second
)

// openEntra builds the credential chain of a provider with auth: entra.
// It reads the environment and the certificate file now, and does no
// network I/O. Its error names the variable or file at fault, never a
// secret.
func openEntra(cfg provider.Config) (*entraAuth, error) {
	lookup := cfg.Lookup
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := func(name string) string { v, _ := lookup(name); return strings.TrimSpace(v) }
	p := cfg.Provider
	c := chainConfig{tenant: p.TenantID, client: p.ClientID, tenantConfigured: p.TenantID != ""}
	if c.tenant == "" {
		c.tenant = env(envTenantID)
	}
	if c.client == "" {
		c.client = env(envClientID)
	}
	c.opts.Cloud.ActiveDirectoryAuthorityHost = env(envAuthority)
	// IMDS is link-local: never through a proxy, and probed once.
	c.probe = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	if a := cfg.Authority; a != nil {
		c.opts.Cloud.ActiveDirectoryAuthorityHost, c.opts.Transport, c.probe = a.URL, a.Client, a.Client
		// The stand-in authority cannot be vouched for by Microsoft's
		// instance discovery (it would ask login.microsoftonline.com).
		c.noDiscovery = true
	}
	want, err := selected(env(envSelect))
	if err != nil {
		return nil, err
	}
	var srcs []*source
	for _, build := range []func(*chainConfig, func(string) string) (*source, error){envSource, workloadSource, managedSource, cliSource} {
		s, err := build(&c, env)
		if err != nil {
			return nil, err
		}
		if s != nil && want(s.name) {
			srcs = append(srcs, s)
		}
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("%s=%s selects no source of the credential chain that is configured", envSelect, env(envSelect))
	}
	return newEntraAuth(srcs)
}

// chainConfig is what every source of the chain shares.
type chainConfig struct {
	tenant, client   string
	tenantConfigured bool // tenant is tenant_id's, not AZURE_TENANT_ID's
	opts             azcore.ClientOptions
	noDiscovery      bool
	probe            *http.Client // the IMDS probe's client
}

// who describes the app registration, never its secret.
func (c *chainConfig) who() string {
	return fmt.Sprintf("client %s, tenant %s", c.client, c.tenant)
}

// needIDs holds a source that names an app registration to having both
// ids.
func (c *chainConfig) needIDs(what string) error {
	switch {
	case c.tenant == "":
		return fmt.Errorf("%s is set but no tenant is: set tenant_id or %s", what, envTenantID)
	case c.client == "":
		return fmt.Errorf("%s is set but no client id is: set client_id or %s", what, envClientID)
	}
	return nil
}

// envSource is the app registration's secret or certificate from the
// environment, or nil when neither is set.
func envSource(c *chainConfig, env func(string) string) (*source, error) {
	secret, certPath := env(envSecret), env(envCertPath)
	switch {
	case secret != "":
		if err := c.needIDs(envSecret); err != nil {
			return nil, err
		}
		cred, err := azidentity.NewClientSecretCredential(c.tenant, c.client, secret,
			&azidentity.ClientSecretCredentialOptions{ClientOptions: c.opts, DisableInstanceDiscovery: c.noDiscovery})
		if err != nil {
			return nil, fmt.Errorf("%s: %s", credSecret, safeMessage(err))
		}
		return &source{name: credSecret, detail: c.who() + ", secret from " + envSecret, cred: cred}, nil
	case certPath != "":
		if err := c.needIDs(envCertPath); err != nil {
			return nil, err
		}
		certs, key, err := readCertificate(certPath, env(envCertPassword))
		if err != nil {
			return nil, err
		}
		send := strings.EqualFold(env(envSendChain), "true") || env(envSendChain) == "1"
		cred, err := azidentity.NewClientCertificateCredential(c.tenant, c.client, certs, key,
			&azidentity.ClientCertificateCredentialOptions{ClientOptions: c.opts, DisableInstanceDiscovery: c.noDiscovery, SendCertificateChain: send})
		if err != nil {
			return nil, fmt.Errorf("%s: %s", credCert, safeMessage(err))
		}
		return &source{name: credCert, detail: c.who() + ", certificate " + certPath, cred: cred}, nil
	}
	return nil, nil
}

// readCertificate reads a PEM or PKCS#12 certificate file with its
// private key. Errors name the file, never its content or password.
func readCertificate(path, password string) ([]*x509.Certificate, any, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, fmt.Errorf("%s %s: %v", envCertPath, path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCertBytes+1))
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("%s %s: %v", envCertPath, path, err)
	case len(data) > maxCertBytes:
		return nil, nil, fmt.Errorf("%s %s is larger than %d bytes: is it the right file?", envCertPath, path, maxCertBytes)
	}
	var pw []byte
	if password != "" {
		pw = []byte(password)
	}
	certs, key, err := azidentity.ParseCertificates(data, pw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: not a certificate with its private key (PEM, or PKCS#12 with %s)", envCertPath, path, envCertPassword)
	}
	return certs, key, nil
}

// workloadSource is the workload identity of a Kubernetes pod, or nil
// when AZURE_FEDERATED_TOKEN_FILE is not set. azidentity reads the file
// again whenever it needs a new assertion, so a rotated token is used.
func workloadSource(c *chainConfig, env func(string) string) (*source, error) {
	file := env(envTokenFile)
	if file == "" {
		return nil, nil
	}
	if err := c.needIDs(envTokenFile); err != nil {
		return nil, err
	}
	cred, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
		ClientOptions: c.opts, DisableInstanceDiscovery: c.noDiscovery, ClientID: c.client, TenantID: c.tenant, TokenFilePath: file})
	if err != nil {
		return nil, fmt.Errorf("%s: %s", credWorkload, safeMessage(err))
	}
	return &source{name: credWorkload, detail: c.who() + ", federated token from " + file, cred: cred}, nil
}

// managedSource is the resource's managed identity: user-assigned when a
// client id is known, else system-assigned. Where it would ask the VM's
// IMDS endpoint, it first checks that one answers.
func managedSource(c *chainConfig, _ func(string) string) (*source, error) {
	o := &azidentity.ManagedIdentityCredentialOptions{ClientOptions: c.opts}
	detail := "system-assigned"
	if c.client != "" {
		o.ID = azidentity.ClientID(c.client)
		detail = "user-assigned, client " + c.client
	}
	cred, err := azidentity.NewManagedIdentityCredential(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", credManaged, safeMessage(err))
	}
	src := &source{name: credManaged, detail: detail, cred: cred}
	if where, err := managedidentity.GetSource(); err == nil && where == managedidentity.DefaultToIMDS {
		src.cred = &imdsProbe{cred: cred, client: c.probe}
		src.detail += ", IMDS"
	} else if err == nil {
		src.detail += ", " + string(where)
	}
	return src, nil
}

// cliSource is the Azure CLI's signed-in account.
func cliSource(c *chainConfig, _ func(string) string) (*source, error) {
	o := &azidentity.AzureCLICredentialOptions{}
	if c.tenantConfigured {
		o.TenantID = c.tenant // as DefaultAzureCredential: only a tenant set for it
	}
	cred, err := azidentity.NewAzureCLICredential(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", credCLI, safeMessage(err))
	}
	return &source{name: credCLI, detail: "az's signed-in account", cred: cred}, nil
}

// selected reads AZURE_TOKEN_CREDENTIALS as DefaultAzureCredential does:
// unset, every source; "prod", the environment, workload and managed
// identities; "dev", the Azure CLI; or one credential's name
// ("EnvironmentCredential" for the secret or certificate).
func selected(v string) (func(name string) bool, error) {
	in := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, x := range names {
				if strings.EqualFold(n, x) {
					return true
				}
			}
			return false
		}
	}
	switch {
	case v == "":
		return func(string) bool { return true }, nil
	case v == "prod":
		return in(credSecret, credCert, credWorkload, credManaged), nil
	case v == "dev":
		return in(credCLI), nil
	case strings.EqualFold(v, "EnvironmentCredential"):
		return in(credSecret, credCert), nil
	case in(credWorkload, credManaged, credCLI)(v):
		return in(v), nil
	}
	return nil, fmt.Errorf("%s=%q: want prod, dev, EnvironmentCredential, %s, %s or %s", envSelect, v, credWorkload, credManaged, credCLI)
}

// source is one credential of the chain, named.
type source struct {
	name   string // azidentity's type: "ClientSecretCredential"
	detail string // which identity, never a secret
	cred   azcore.TokenCredential
	// last is the outcome of its last GetToken: nil, or its error.
	last atomic.Pointer[error]
	// answered is set on the chain when this source returns a token.
	answered *atomic.Pointer[source]
}

// GetToken asks the source, and records that it answered. Its error is
// azidentity's, unchanged: the chain reads it to go on or stop.
func (s *source) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := s.cred.GetToken(ctx, o)
	if err != nil {
		s.last.Store(&err)
		return tok, err
	}
	s.last.Store(nil)
	s.answered.Store(s)
	return tok, nil
}

func (s *source) String() string { return s.name + " (" + s.detail + ")" }

// imdsProbe is a managed identity that would ask the VM's IMDS endpoint.
// As DefaultAzureCredential does, it first checks, within a second and
// with no retry, that something answers there: outside Azure the chain
// then goes on to the Azure CLI at once, instead of waiting out IMDS's
// retries and stopping on their failure.
type imdsProbe struct {
	cred   azcore.TokenCredential
	client *http.Client
	ok     atomic.Bool
}

func (p *imdsProbe) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if !p.ok.Load() {
		cx, cancel := context.WithTimeout(ctx, imdsProbeTime)
		defer cancel()
		req, err := http.NewRequestWithContext(cx, http.MethodGet, imdsURL, nil) // no Metadata header: IMDS refuses it at once
		if err != nil {
			return azcore.AccessToken{}, err
		}
		resp, err := p.client.Do(req)
		if err != nil {
			return azcore.AccessToken{}, azidentity.NewCredentialUnavailableError(credManaged + ": no managed identity endpoint answered (not on Azure?)")
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		p.ok.Store(true)
	}
	return p.cred.GetToken(ctx, o)
}

// entraAuth is the Auth of a provider with auth: entra.
type entraAuth struct {
	sources  []*source
	answered atomic.Pointer[source] // the source that gave the last token
	tokens   *tokens
}

func newEntraAuth(srcs []*source) (*entraAuth, error) {
	a := &entraAuth{sources: srcs}
	creds := make([]azcore.TokenCredential, len(srcs))
	for i, s := range srcs {
		s.answered = &a.answered
		creds[i] = s
	}
	// Once a source answers, the chain keeps to it (RetrySources false),
	// as DefaultAzureCredential does.
	chain, err := azidentity.NewChainedTokenCredential(creds, nil)
	if err != nil {
		return nil, fmt.Errorf("azure: credential chain: %w", err)
	}
	a.tokens = &tokens{cred: chain, now: time.Now, classify: a.tokenError}
	return a, nil
}

// Authenticate sets the bearer token, waiting for one at most until
// ctx's deadline. A refused credential wraps gw.ErrCredentialRefused.
func (a *entraAuth) Authenticate(ctx context.Context, req *http.Request, _ []byte) error {
	tok, err := a.tokens.token(ctx)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Del("api-key")
	return nil
}

// Ready obtains a token now (`oncegate check --connect`).
func (a *entraAuth) Ready(ctx context.Context) error {
	_, err := a.tokens.token(ctx)
	return err
}

// Describe names the source that gave the token, or the chain's sources
// before one did; never a secret or a token.
func (a *entraAuth) Describe() string {
	if s := a.answered.Load(); s != nil {
		return "Microsoft Entra ID token from " + s.String()
	}
	names := make([]string, len(a.sources))
	for i, s := range a.sources {
		names[i] = s.String()
	}
	return "Microsoft Entra ID token from the first to answer of: " + strings.Join(names, "; ")
}

// tokenError names a failure to obtain a token without its secrets. The
// token endpoint's refusal (a 4xx answer) keeps only the source, the
// status and the OAuth error code; a chain none of whose sources has a
// credential says what each lacked; both refuse the route's account. Any
// other failure (the endpoint unreachable, a 5xx) is transient.
func (a *entraAuth) tokenError(err error) error {
	var afe *azidentity.AuthenticationFailedError
	if errors.As(err, &afe) {
		who := "the credential chain"
		if s := a.failed(); s != nil {
			who = s.name
		}
		if r := afe.RawResponse; r != nil {
			if r.StatusCode >= 500 || r.StatusCode == http.StatusTooManyRequests {
				return fmt.Errorf("azure: Microsoft Entra ID is unavailable to %s (HTTP %d)", who, r.StatusCode)
			}
			return fmt.Errorf("%w: %s (HTTP %d%s)", ErrTokenRefused, who, r.StatusCode, oauthCode(r))
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("azure: %s: no Microsoft Entra ID token within %s", who, tokenFetchTime)
		}
		if s := a.failed(); s != nil {
			err = *s.last.Load()
		}
		return fmt.Errorf("azure: %s: %s", who, reason(err, who))
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("azure: no Microsoft Entra ID token within %s", tokenFetchTime)
	}
	// Every source said it has no credential to offer.
	var why []string
	for _, s := range a.sources {
		if e := s.last.Load(); e != nil {
			why = append(why, s.name+": "+reason(*e, s.name))
		}
	}
	return fmt.Errorf("%w: no source of the chain has one (%s)", ErrNoCredential, strings.Join(why, "; "))
}

// failed is the source whose error ended the chain: the last one that
// failed, in chain order.
func (a *entraAuth) failed() *source {
	var last *source
	for _, s := range a.sources {
		if s.last.Load() != nil {
			last = s
		}
	}
	return last
}

// oauthCode reads a token endpoint's error answer for its OAuth error and
// first AADSTS code (" invalid_client AADSTS7000215"), never its
// description, which may name more than it should.
func oauthCode(r *http.Response) string {
	body, err := runtime.Payload(r)
	if err != nil {
		return ""
	}
	var e struct {
		Error      string `json:"error"`
		ErrorCodes []int  `json:"error_codes"`
	}
	if json.Unmarshal(body, &e) != nil || !isWord(e.Error) {
		return ""
	}
	out := " " + e.Error
	if len(e.ErrorCodes) > 0 {
		out += fmt.Sprintf(" AADSTS%d", e.ErrorCodes[0])
	}
	return out
}

// isWord reports an OAuth error code's shape: short, lower-case ASCII
// letters and underscores.
func isWord(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// reason is an SDK error's text on one line, without the source's name
// it repeats, cut short: azidentity's messages name variables, files,
// hosts and URLs without their queries, never a secret's value (an
// answer's body, which could say more, comes only with RawResponse, read
// by oauthCode instead).
func reason(err error, name string) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	for {
		t := strings.TrimPrefix(s, name+": ")
		if t == s {
			break
		}
		s = t
	}
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

// safeMessage is an SDK error's text at Open, cut short.
func safeMessage(err error) string { return reason(err, "") }

var _ provider.Auth = (*entraAuth)(nil)
