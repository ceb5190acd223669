package mock

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // x5t is SHA-1 by RFC 7515; only a thumbprint
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The Microsoft Entra ID fake (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow):
// a tenant's OpenID configuration and its OAuth 2.0 v2.0 token endpoint,
// for the client-credentials grant of an app registration — with its
// client secret, or a client assertion (a JWT signed with its
// certificate, or a workload identity's federated token) — answering in
// Entra's own shapes (AADSTS error codes). What the Azure SDK for Go
// (azidentity, through MSAL) asks, in its order:
//
//	GET  {authority}/{tenant}/v2.0/.well-known/openid-configuration
//	POST {authority}/{tenant}/oauth2/v2.0/token
//
// (Instance discovery, GET https://login.microsoftonline.com/common/discovery/instance,
// is asked only for an authority host Microsoft does not know, and goes
// to Microsoft itself: a client of this fake turns it off.) A managed
// identity's tokens come from GET /msi/token, as App Service's endpoint
// answers them. The tokens it
// issues are what the Azure OpenAI fake takes as
// `Authorization: Bearer`, until they expire. azidentity requires the
// authority to be HTTPS: serve the mock with TLS for it.

// The app registration the fake knows unless Config.Entra says otherwise.
const (
	DefaultEntraTenant = "72f988bf-0000-4000-8000-00000000e17a"
	DefaultEntraClient = "3e6f0a4c-0000-4000-8000-0000000c11e7"
	DefaultEntraSecret = "entra-mock-secret~Xq8Q"
)

// DefaultIdentityHeader is the secret an App Service managed identity
// endpoint takes in X-IDENTITY-HEADER (its IDENTITY_HEADER variable)
// unless Config.Entra says otherwise.
const DefaultIdentityHeader = "mock-identity-header-5a7e"

// entraScope is the scope of an Azure OpenAI token.
const entraScope = "https://cognitiveservices.azure.com/.default"

// azureBadToken is Azure OpenAI's answer to a missing, unknown, expired or
// wrong-audience bearer token: its own shape, not the error envelope.
const azureBadToken = "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired."

// EntraConfig is the tenant, application and credentials the Entra ID
// fake accepts.
type EntraConfig struct {
	// TenantID, ClientID and ClientSecret: the app registration (defaults
	// DefaultEntraTenant, DefaultEntraClient, DefaultEntraSecret).
	TenantID, ClientID, ClientSecret string
	// Others are further app registrations of the tenant: client id →
	// client secret.
	Others map[string]string
	// Certificate, when set, is a certificate of the app registration:
	// client assertions signed with its key are accepted.
	Certificate *x509.Certificate
	// FederatedToken, when set, is a workload identity's federated token
	// the app registration trusts, accepted as a client assertion.
	FederatedToken string
	// TokenTTL is the life of the access tokens issued (default 1h).
	TokenTTL time.Duration
	// IdentityHeader is what the managed identity endpoint takes in
	// X-IDENTITY-HEADER (default DefaultIdentityHeader). Its identities
	// are the system-assigned one and ClientID, user-assigned.
	IdentityHeader string
}

// entraAuth issues and checks the fake's Entra ID tokens.
type entraAuth struct {
	mu     sync.Mutex
	cfg    EntraConfig
	n      int
	issued chan struct{} // closed and replaced at every issuance
	tokens map[string]etoken
}

type etoken struct {
	exp   time.Time
	scope string
}

func newEntraAuth(c EntraConfig) *entraAuth {
	if c.TenantID == "" {
		c.TenantID = DefaultEntraTenant
	}
	if c.ClientID == "" {
		c.ClientID = DefaultEntraClient
	}
	if c.ClientSecret == "" {
		c.ClientSecret = DefaultEntraSecret
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = time.Hour
	}
	if c.IdentityHeader == "" {
		c.IdentityHeader = DefaultIdentityHeader
	}
	return &entraAuth{cfg: c, issued: make(chan struct{}), tokens: map[string]etoken{}}
}

// routeEntra adds the Entra ID endpoints to the mock's mux.
func (m *Mock) routeEntra() {
	m.mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", m.serveOpenIDConfig)
	m.mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", m.serveEntraToken)
	m.mux.HandleFunc("GET /msi/token", m.serveManagedIdentity)
}

// serveManagedIdentity is an App Service (and Functions, Container Apps)
// managed identity endpoint, as IDENTITY_ENDPOINT names it
// (learn.microsoft.com/azure/app-service/overview-managed-identity#rest-endpoint-reference):
// GET with api-version 2019-08-01, the resource, an optional client_id,
// and X-IDENTITY-HEADER.
func (m *Mock) serveManagedIdentity(w http.ResponseWriter, r *http.Request) {
	e := m.entra
	e.mu.Lock()
	cfg := e.cfg
	e.mu.Unlock()
	q := r.URL.Query()
	id := q.Get("client_id")
	switch {
	case subtle.ConstantTimeCompare([]byte(r.Header.Get("X-IDENTITY-HEADER")), []byte(cfg.IdentityHeader)) != 1:
		writeJSON(w, 401, map[string]any{"statusCode": 401, "message": "Unauthorized: the X-IDENTITY-HEADER is missing or wrong."})
		return
	case q.Get("api-version") != "2019-08-01" || q.Get("resource") == "":
		writeJSON(w, 400, map[string]any{"statusCode": 400, "message": "Bad Request: api-version 2019-08-01 and resource are required."})
		return
	case id != "" && id != cfg.ClientID:
		writeJSON(w, 400, map[string]any{"statusCode": 400, "message": "Unable to load the proper Managed Identity.", "correlationId": newID()})
		return
	}
	resource := strings.TrimSuffix(q.Get("resource"), "/")
	tok := e.issue(resource+"/.default", cfg.TokenTTL)
	writeJSON(w, 200, map[string]any{"access_token": tok, "token_type": "Bearer", "resource": resource,
		"expires_on": fmt.Sprint(time.Now().Add(cfg.TokenTTL).Unix()), "client_id": orDefault(id, cfg.ClientID)})
}

// EntraTokensIssued counts the Entra ID access tokens issued.
func (m *Mock) EntraTokensIssued() int {
	m.entra.mu.Lock()
	defer m.entra.mu.Unlock()
	return m.entra.n
}

// AwaitEntraTokens waits until at least n Entra ID tokens were issued, or
// ctx is done.
func (m *Mock) AwaitEntraTokens(ctx context.Context, n int) error {
	for {
		m.entra.mu.Lock()
		got, ch := m.entra.n, m.entra.issued
		m.entra.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d Entra ID tokens issued, want %d: %w", got, n, ctx.Err())
		}
	}
}

// SetEntraTokenTTL sets the life of the Entra ID tokens issued from now on.
func (m *Mock) SetEntraTokenTTL(d time.Duration) {
	m.entra.mu.Lock()
	m.entra.cfg.TokenTTL = d
	m.entra.mu.Unlock()
}

// ExpireEntraTokens makes every Entra ID token issued so far expired: the
// Azure OpenAI fake refuses them.
func (m *Mock) ExpireEntraTokens() {
	m.entra.mu.Lock()
	defer m.entra.mu.Unlock()
	for k, t := range m.entra.tokens {
		t.exp = time.Now().Add(-time.Second)
		m.entra.tokens[k] = t
	}
}

// authority is the root the request came to: https://host.
func authority(r *http.Request) string {
	scheme := "https"
	if r.TLS == nil {
		scheme = "http"
	}
	return scheme + "://" + r.Host
}

// serveOpenIDConfig answers a tenant's OpenID Connect discovery document,
// trimmed to what clients read, in Entra's words.
func (m *Mock) serveOpenIDConfig(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	if !m.entra.knowsTenant(tenant) {
		entraError(w, 400, "invalid_tenant", 90002, fmt.Sprintf("Tenant '%s' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud. Check with your subscription administrator, this may happen if there are no active subscriptions for the tenant.", tenant))
		return
	}
	base := authority(r) + "/" + tenant
	writeJSON(w, 200, map[string]any{
		"token_endpoint":                        base + "/oauth2/v2.0/token",
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt", "client_secret_basic"},
		"jwks_uri":                              base + "/discovery/v2.0/keys",
		"response_modes_supported":              []string{"query", "fragment", "form_post"},
		"subject_types_supported":               []string{"pairwise"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"response_types_supported":              []string{"code", "id_token", "code id_token", "id_token token"},
		"scopes_supported":                      []string{"openid", "profile", "email", "offline_access"},
		"issuer":                                base + "/v2.0",
		"request_uri_parameter_supported":       false,
		"authorization_endpoint":                base + "/oauth2/v2.0/authorize",
		"device_authorization_endpoint":         base + "/oauth2/v2.0/devicecode",
		"end_session_endpoint":                  base + "/oauth2/v2.0/logout",
		"tenant_region_scope":                   "NA",
		"cloud_instance_name":                   "microsoftonline.com",
	})
}

func (e *entraAuth) knowsTenant(t string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.EqualFold(t, e.cfg.TenantID)
}

// entraError writes Entra's OAuth error shape.
func entraError(w http.ResponseWriter, status int, code string, aadsts int, desc string) {
	now := time.Now().UTC().Format("2006-01-02 15:04:05Z")
	trace := newID()
	writeJSON(w, status, map[string]any{
		"error":             code,
		"error_description": fmt.Sprintf("AADSTS%d: %s Trace ID: %s Correlation ID: %s Timestamp: %s", aadsts, desc, trace, newID(), now),
		"error_codes":       []int{aadsts},
		"timestamp":         now,
		"trace_id":          trace,
		"correlation_id":    newID(),
		"error_uri":         fmt.Sprintf("https://login.microsoftonline.com/error?code=%d", aadsts),
	})
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// serveEntraToken is the v2.0 token endpoint: the client-credentials
// grant, authenticated by the client secret or a client assertion.
func (m *Mock) serveEntraToken(w http.ResponseWriter, r *http.Request) {
	e := m.entra
	tenant := r.PathValue("tenant")
	if !e.knowsTenant(tenant) {
		entraError(w, 400, "invalid_tenant", 90002, fmt.Sprintf("Tenant '%s' not found.", tenant))
		return
	}
	if err := r.ParseForm(); err != nil {
		entraError(w, 400, "invalid_request", 900144, "The request body must contain the following parameter: 'grant_type'.")
		return
	}
	f := r.PostForm
	e.mu.Lock()
	cfg := e.cfg
	e.mu.Unlock()
	switch {
	case f.Get("grant_type") != "client_credentials":
		entraError(w, 400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type '"+f.Get("grant_type")+"'.")
		return
	case f.Get("scope") == "":
		entraError(w, 400, "invalid_request", 900144, "The request body must contain the following parameter: 'scope'.")
		return
	case f.Get("client_id") != cfg.ClientID && cfg.Others[f.Get("client_id")] == "":
		entraError(w, 400, "unauthorized_client", 700016, fmt.Sprintf("Application with identifier '%s' was not found in the directory '%s'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.", f.Get("client_id"), tenant))
		return
	}
	if id := f.Get("client_id"); id != cfg.ClientID {
		// Another app: its own secret, and no certificate or federation.
		cfg = EntraConfig{ClientID: id, ClientSecret: cfg.Others[id], TokenTTL: cfg.TokenTTL}
	}
	if status, code, aadsts, msg := cfg.checkClient(f.Get("client_secret"), f.Get("client_assertion_type"), f.Get("client_assertion"), authority(r)+r.URL.Path); status != 0 {
		entraError(w, status, code, aadsts, msg)
		return
	}
	tok := e.issue(f.Get("scope"), cfg.TokenTTL)
	secs := int(cfg.TokenTTL / time.Second)
	writeJSON(w, 200, map[string]any{"token_type": "Bearer", "expires_in": secs, "ext_expires_in": secs, "access_token": tok})
}

// checkClient authenticates the app: its secret, or an assertion. A
// refusal returns its status, OAuth code, AADSTS number and message.
func (c EntraConfig) checkClient(secret, assertionType, assertion, endpoint string) (int, string, int, string) {
	switch {
	case secret != "":
		if subtle.ConstantTimeCompare([]byte(secret), []byte(c.ClientSecret)) != 1 {
			return 401, "invalid_client", 7000215, fmt.Sprintf("Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '%s'.", c.ClientID)
		}
		return 0, "", 0, ""
	case assertion == "":
		return 400, "invalid_request", 7000218, "The request body must contain the following parameter: 'client_assertion' or 'client_secret'."
	case assertionType != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
		return 400, "invalid_request", 50027, "Invalid client_assertion_type: want urn:ietf:params:oauth:client-assertion-type:jwt-bearer."
	case c.FederatedToken != "" && subtle.ConstantTimeCompare([]byte(assertion), []byte(c.FederatedToken)) == 1:
		return 0, "", 0, ""
	}
	return c.checkAssertion(assertion, endpoint)
}

// checkAssertion verifies a client assertion signed with the app's
// certificate: PS256 (or RS256) with the certificate's thumbprint in
// x5t#S256 (or x5t), aud the token endpoint, iss and sub the client,
// within its validity.
func (c EntraConfig) checkAssertion(assertion, endpoint string) (int, string, int, string) {
	bad := func(aadsts int, msg string) (int, string, int, string) { return 401, "invalid_client", aadsts, msg }
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return bad(50027, "JWT token is invalid or malformed.")
	}
	var hdr struct {
		Alg  string `json:"alg"`
		X5t  string `json:"x5t"`
		X5tS string `json:"x5t#S256"`
	}
	var claims struct {
		Aud, Iss, Sub string
		Exp, Nbf      json.Number
	}
	if decodeSegment(parts[0], &hdr) != nil || decodeSegment(parts[1], &claims) != nil {
		return bad(50027, "JWT token is invalid or malformed.")
	}
	cert := c.Certificate
	if cert == nil {
		return bad(700027, "Client assertion failed signature validation.")
	}
	s256, s1 := sha256.Sum256(cert.Raw), sha1.Sum(cert.Raw) //nolint:gosec
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok || (!thumbMatches(hdr.X5tS, s256[:]) && !thumbMatches(hdr.X5t, s1[:])) {
		return bad(700027, "Client assertion failed signature validation. The key was not found.")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return bad(50027, "JWT token is invalid or malformed.")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	switch hdr.Alg {
	case "PS256":
		err = rsa.VerifyPSS(pub, crypto.SHA256, digest[:], sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto})
	case "RS256":
		err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig)
	default:
		err = fmt.Errorf("alg %q", hdr.Alg)
	}
	if err != nil {
		return bad(700027, "Client assertion failed signature validation.")
	}
	exp, _ := claims.Exp.Int64()
	nbf, _ := claims.Nbf.Int64()
	now := time.Now().Unix()
	switch {
	case claims.Aud != endpoint:
		return bad(700212, fmt.Sprintf("No matching federated identity record found for presented assertion audience '%s'.", claims.Aud))
	case claims.Iss != c.ClientID || claims.Sub != c.ClientID:
		return bad(700021, "Client assertion application identifier doesn't match 'client_id' parameter.")
	case exp <= now || nbf > now+300:
		return bad(700024, "Client assertion is not within its valid time range.")
	}
	return 0, "", 0, ""
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// thumbMatches compares a header's base64 thumbprint (standard or URL
// alphabet) with sum.
func thumbMatches(h string, sum []byte) bool {
	if h == "" {
		return false
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.RawURLEncoding, base64.URLEncoding} {
		if b, err := enc.DecodeString(h); err == nil && subtle.ConstantTimeCompare(b, sum) == 1 {
			return true
		}
	}
	return false
}

// issue records and returns a new access token for scope.
func (e *entraAuth) issue(scope string, ttl time.Duration) string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	tok := fmt.Sprintf("eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-mock-%d.%s", e.n, base64.RawURLEncoding.EncodeToString(b[:]))
	e.tokens[tok] = etoken{exp: time.Now().Add(ttl), scope: scope}
	close(e.issued)
	e.issued = make(chan struct{})
	return tok
}

// valid reports whether tok is a live token issued for Azure OpenAI.
func (e *entraAuth) valid(tok string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.tokens[tok]
	return ok && time.Now().Before(t.exp) && strings.Contains(" "+t.scope+" ", " "+entraScope+" ")
}

// azureBearer checks an Azure OpenAI request's bearer token, answering
// Azure's 401 when it is not a live token of the fake's.
func (e *entraAuth) azureBearer(w http.ResponseWriter, authz string) bool {
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if ok && e.valid(strings.TrimSpace(tok)) {
		return true
	}
	writeJSON(w, 401, map[string]any{"statusCode": 401, "message": azureBadToken})
	return false
}

// OnlyTo wraps client (one that trusts the mock's TLS certificate, as
// httptest.Server.Client) so that it reaches baseURL's host and refuses
// every other: a test's Azure credential chain then never reaches a
// cloud's endpoint, a VM's managed identity address included.
func OnlyTo(client *http.Client, baseURL string) *http.Client {
	c := *client
	c.Transport = onlyTo{base: client.Transport, host: strings.TrimPrefix(strings.TrimPrefix(baseURL, "https://"), "http://")}
	return &c
}

type onlyTo struct {
	base http.RoundTripper
	host string
}

func (o onlyTo) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != o.host {
		return nil, fmt.Errorf("mock: refusing to reach %s from a test (only %s)", r.URL.Host, o.host)
	}
	if o.base == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return o.base.RoundTrip(r)
}
