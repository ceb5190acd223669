package mock

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Vertex AI fake (cloud.google.com/vertex-ai/docs/reference/rest):
// publishers/google models in the Gemini format and publishers/anthropic
// models through rawPredict / streamRawPredict in the Messages format,
// behind OAuth2 bearer tokens that its own token endpoint issues for a
// service account's signed JWT (developers.google.com/identity/protocols/oauth2/service-account).

// DefaultServiceAccountEmail is the client_email the token endpoint
// accepts unless Config.VertexClientEmail says otherwise.
const DefaultServiceAccountEmail = "oncegate-mock@oncegate-mock.iam.gserviceaccount.com"

// cloudPlatformScope is the scope Vertex AI calls need.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// serviceAccountKey is the test service account's private key: a key made
// for the mock and used nowhere else, so tests and the `oncegate mock`
// command can sign as the account without generating one.
const serviceAccountKey = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCstqQ+rMcZSjZ3
Glxo9fU5n9Q5Eh2qr9MDh0m9uB2p/CIlzhPP1vOspaCGaGF2v7s0DwPF9AZBnfWS
qe84YRez0gIrSfXkYZVltf6IK2qAo9erI4+zzQ6LajvRN9e0KzBsSyv77s47iVcs
3wy6wKL/IBXbD4sLbNIKUv0W2R6F5mx+jNr4NLiY3Zunw3eydKobjmn6LUjo21pj
THVb41ONB+5+4k1GEuL7D8YwXm10pOpOe38nP1e5Jc8DRBgwbEkyzgR9Xf8ClKV8
+VFsNsXMSzedwPbHK+3avB7G7Z9J51dRUhtpHGe1lpat90hWUA2EN+UqJeeQCIgp
BnNnsvnPAgMBAAECggEAALQFACz+PzKc/SgnfH/qiIUHkqyUYAJeQWiWxXB598a1
3Dc2FRsNcURYCSQPUtyd+6zHTvza3P/dJO85254S6sxYmOowrPDexa6+Lg9rMWyO
r2eHfsEU0D7VpoOWhmkZ8Imae2icq1kNo0+h2CLPpxVE3C2jMHU4ImBLH9bbd8ps
0oTk6EPYPeoCyzp47i4NmYOcy4Gwj1s+EIZVxYTFwzWHNMGcwhrpmnhs6iW/7nu0
b2GmfVDvxvQDjzbtD5wCUGyQTeq/yFO2CjXyH3IdpAiHgLCbYrgiuenPB+mBON0c
T1ft3L35aycKEcN40JPIaGKYOVczmiC8TU3wJorO7QKBgQDxMmxzC9mZ3vRT22U3
ajUCDCEW8z1CIf83AU2KlOjx2kjyVa3ZzldONNv/XdVk5khpTv++sz+eVuCLGdf1
+DNW+Ub/RThEee+OzeoHUU+wzxz4SSdXKYIYJpyl56D+7uQ0oVTMJ73wp2PrueSe
cTUUwHhAy+zHeq2w1o1ijLwhgwKBgQC3UDx1hZ5FfliIAiixL3rfAFpRyyZUH8tD
vv55EZvuRJ2ls7FRrhhIdE5FO8BxYw62AIVPRqh9NQ80+1hcjJUfOIZ7Pn32Q2oN
pP/wWGUo/kv0SXY2kX2YQUf6+pul6xUyj8e0oKqVUJjKe6DmSjp8hWKiq9iZxWaU
w+55xMcQxQKBgQDj8bNsRpavRHXDimRtqoHOHYhoGBicl2SKp0CQ54n+hzzJSQ+z
972qu2nuPM+fO8LTQ0WPA/frvE8ZJqNiYd6jI5JlTRWQIWy0mQXDRKT7g8DtJLV5
OlEoYdVJNU6Bn2MsGgv5pNVsycU00cmts29m3T7IffCX1OixZxLXQAnL4QKBgGHi
a1ZJ0jjDfZyqonXyp4a6loAEnWPgUlbLfvDBEWWKqC+aIz49W2QdDspzXJBvV6Sh
5I1vanrpQUSGTimlO9+e/FiFBxff6Zp9l9kMKoBYQdChBYmf6NPLUBdZiJFxVTFZ
i0cNX+k5T00X9NPjoRVq2D+Kya9atCsN8KJ/C9kNAoGAFdd3u2rn/DYLJFh8ZcT+
zmkaCR7PbzwJ+5skv/kLF0Uab0gRYMJU94l9KatzdH1Sv7vGziky/gHKVhjTkiFH
5IO+ixPIfPvXy0YWq4ibrYP1xSkK9Os4wRSYCqqf0rxql/J/Twzh2/EkhzmhaLJy
pu1FErSXkOUlJJBN6PyEbwY=
-----END PRIVATE KEY-----
`

var defaultKey = sync.OnceValue(func() *rsa.PrivateKey {
	blk, _ := pem.Decode([]byte(serviceAccountKey))
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		panic(fmt.Sprintf("mock: service account key: %v", err))
	}
	return k.(*rsa.PrivateKey)
})

// ServiceAccountJSON is a service-account key file for the mock's test
// account whose token_uri is the mock's token endpoint at baseURL: what
// golang.org/x/oauth2/google and Google's SDKs read as credentials.
func ServiceAccountJSON(baseURL string) []byte {
	b, _ := json.MarshalIndent(map[string]string{
		"type": "service_account", "project_id": "oncegate-mock", "private_key_id": "mock-key-1",
		"private_key": serviceAccountKey, "client_email": DefaultServiceAccountEmail, "client_id": "100000000000000000001",
		"auth_uri": baseURL + "/auth", "token_uri": strings.TrimSuffix(baseURL, "/") + "/token",
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs", "universe_domain": "googleapis.com",
	}, "", "  ")
	return b
}

// WriteServiceAccount writes ServiceAccountJSON(baseURL) to a file in dir
// and returns its path.
func WriteServiceAccount(dir, baseURL string) (string, error) {
	p := filepath.Join(dir, "mock-service-account.json")
	if err := os.WriteFile(p, ServiceAccountJSON(baseURL), 0o600); err != nil {
		return "", fmt.Errorf("write service account: %w", err)
	}
	return p, nil
}

// vertexAuth issues and checks the fake's access tokens.
type vertexAuth struct {
	email string
	key   *rsa.PublicKey
	ttl   time.Duration
	mu    sync.Mutex
	n     int
	// tokens: each issued token's expiry and whether it carries the
	// cloud-platform scope.
	tokens map[string]vtoken
}

type vtoken struct {
	exp   time.Time
	scope bool
}

func newVertexAuth(cfg *Config) *vertexAuth {
	v := &vertexAuth{email: cfg.VertexClientEmail, key: cfg.VertexPublicKey, ttl: cfg.VertexTokenTTL, tokens: map[string]vtoken{}}
	if v.email == "" {
		v.email = DefaultServiceAccountEmail
	}
	if v.ttl <= 0 {
		v.ttl = time.Hour
	}
	return v
}

func (v *vertexAuth) publicKey() *rsa.PublicKey {
	if v.key != nil {
		return v.key
	}
	return &defaultKey().PublicKey
}

// TokensIssued counts the access tokens the token endpoint issued.
func (m *Mock) TokensIssued() int {
	m.vertex.mu.Lock()
	defer m.vertex.mu.Unlock()
	return m.vertex.n
}

// ExpireTokens makes every access token issued so far expired: the next
// Vertex call with one is refused 401 UNAUTHENTICATED.
func (m *Mock) ExpireTokens() {
	m.vertex.mu.Lock()
	defer m.vertex.mu.Unlock()
	for k, t := range m.vertex.tokens {
		t.exp = time.Now().Add(-time.Second)
		m.vertex.tokens[k] = t
	}
}

func tokenError(w http.ResponseWriter, code, desc string) {
	writeJSON(w, 400, map[string]string{"error": code, "error_description": desc})
}

// serveToken is the OAuth2 token endpoint: the JWT-bearer grant
// (RFC 7523) with an RS256 assertion signed by the service account.
func (m *Mock) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request", "bad form")
		return
	}
	if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		tokenError(w, "unsupported_grant_type", "Invalid grant_type: "+r.PostForm.Get("grant_type"))
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		tokenError(w, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
		return
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Aud   string `json:"aud"`
		Exp   int64  `json:"exp"`
		Iat   int64  `json:"iat"`
	}
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || json.Unmarshal(hb, &hdr) != nil || json.Unmarshal(cb, &claims) != nil {
		tokenError(w, "invalid_grant", "Invalid JWT.")
		return
	}
	v := m.vertex
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if hdr.Alg != "RS256" || rsa.VerifyPKCS1v15(v.publicKey(), crypto.SHA256, sum[:], sig) != nil {
		tokenError(w, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	now := time.Now()
	switch {
	case claims.Iss != v.email:
		tokenError(w, "invalid_grant", "Invalid grant: account not found")
		return
	case claims.Exp < now.Unix() || claims.Iat > now.Add(5*time.Minute).Unix():
		tokenError(w, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
		return
	case !strings.HasSuffix(claims.Aud, "/token"):
		tokenError(w, "invalid_grant", "Invalid JWT: aud must be the token endpoint")
		return
	}
	v.mu.Lock()
	v.n++
	tok := "ya29.mock-" + strconv.Itoa(v.n)
	v.tokens[tok] = vtoken{exp: now.Add(v.ttl), scope: strings.Contains(" "+claims.Scope+" ", " "+cloudPlatformScope+" ")}
	v.mu.Unlock()
	writeJSON(w, 200, map[string]any{"access_token": tok, "expires_in": int(v.ttl.Seconds()), "token_type": "Bearer"})
}

func vertexUnauthenticated(w http.ResponseWriter) {
	googleError(w, 401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
		[]any{errorInfo("ACCESS_TOKEN_TYPE_UNSUPPORTED", "aiplatform.googleapis.com")})
}

// check refuses a request without a live token the endpoint issued.
func (v *vertexAuth) check(x *exchange) bool {
	tok, ok := strings.CutPrefix(x.r.Header.Get("Authorization"), "Bearer ")
	v.mu.Lock()
	t, known := v.tokens[tok]
	v.mu.Unlock()
	switch {
	case !ok || !known:
		vertexUnauthenticated(x.w)
		return false
	case time.Now().After(t.exp):
		googleError(x.w, 401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
			[]any{errorInfo("ACCESS_TOKEN_EXPIRED", "aiplatform.googleapis.com")})
		return false
	case !t.scope:
		googleError(x.w, 403, "PERMISSION_DENIED", "Request had insufficient authentication scopes.",
			[]any{errorInfo("ACCESS_TOKEN_SCOPE_INSUFFICIENT", "aiplatform.googleapis.com")})
		return false
	}
	return true
}

// serveVertex answers POST /v1/projects/{p}/locations/{l}/publishers/{pub}/models/{model}:{method}.
func (m *Mock) serveVertex(w http.ResponseWriter, r *http.Request) {
	model, method := splitMethod(r.PathValue("call"))
	switch r.PathValue("publisher") {
	case "google":
		m.serveGeminiFormat(w, r, model, method, geminiCodec{vertex: m.vertex})
	case "anthropic":
		m.serveVertexAnthropic(w, r, model, method)
	default:
		googleError(w, 404, "NOT_FOUND", "Publisher Model `"+r.URL.Path+"` not found.", nil)
	}
}

func (m *Mock) serveVertexAnthropic(w http.ResponseWriter, r *http.Request, model, method string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	if method != "rawPredict" && method != "streamRawPredict" {
		googleError(w, 404, "NOT_FOUND", "Method not found.", nil)
		return
	}
	if model == "count-tokens" && method == "rawPredict" {
		m.vertexCountTokens(w, r, body)
		return
	}
	a, in, err := decodeAnthropic(body)
	switch {
	case err != nil:
		anError(w, 400, "invalid_request_error", err.Error())
		return
	case !vertexVersion(in.AnthropicVersion):
		anError(w, 400, "invalid_request_error", "anthropic_version: Input should be 'vertex-2023-10-16'")
		return
	case in.Model != "":
		anError(w, 400, "invalid_request_error", "model: Extra inputs are not permitted")
		return
	case a.stream != (method == "streamRawPredict"):
		anError(w, 400, "invalid_request_error", "stream must match the method ("+method+")")
		return
	}
	a.model = model
	x := m.begin(vertexAnthropic{v: m.vertex}, w, r, a)
	x.finishServe()
}

// vertexAnthropic answers Anthropic models on Vertex: Messages bodies,
// Google's errors for what Vertex itself refuses (credentials, quota,
// availability), Anthropic's for what the model refuses.
type vertexAnthropic struct {
	anWire
	v *vertexAuth
}

func (c vertexAnthropic) authenticate(x *exchange, _ []byte) bool { return c.v.check(x) }

// vertexModelNotFound is Vertex AI's message for a publisher model the
// project cannot use or that does not exist.
func vertexModelNotFound(r *http.Request, publisher, model string) string {
	return "Publisher Model `projects/" + r.PathValue("project") + "/locations/" + r.PathValue("location") + "/publishers/" + publisher +
		"/models/" + model + "` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions"
}

func (c vertexAnthropic) fail(x *exchange, f *Fault) {
	retryHeaders(x.w.Header(), f)
	switch f.Type {
	case FaultAuth:
		vertexUnauthenticated(x.w)
		return
	case FaultModelNotFound:
		// Vertex itself answers, before the model: Google's shape.
		googleError(x.w, 404, "NOT_FOUND", orDefault(f.Message, vertexModelNotFound(x.r, "anthropic", x.req.model)), nil)
		return
	case FaultContextLength:
		anError(x.w, 400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
		return
	case FaultContentPolicy:
		anError(x.w, 400, "invalid_request_error", "Output blocked by content filtering policy")
		return
	case FaultQuota:
		googleError(x.w, 429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/online_prediction_tokens_per_minute_per_base_model with base model: anthropic-claude. Please submit a quota increase request.", nil)
		return
	}
	status := orInt(f.Status, 500)
	if strings.HasSuffix(f.ErrorType, "_error") || !(status == 429 || status == 401 || status == 403 || status == 503 || status == 504) {
		anError(x.w, status, orDefault(f.ErrorType, anErrorType(status)), orDefault(f.Message, anMessage(status)))
		return
	}
	code, st, msg := googleStatus(f)
	if code == 429 && f.Message == "" {
		msg = "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
	}
	googleError(x.w, code, st, msg, nil)
}

func anMessage(status int) string {
	if status == 529 {
		return "Overloaded"
	}
	return orDefault(http.StatusText(status), "Error")
}

// vertexVersion reports whether a body's anthropic_version is one Vertex
// takes: vertex-2023-10-16 (Vertex's documented value), or the dated API
// version anthropic-sdk-go's vertex option moves there from its
// anthropic-version header.
func vertexVersion(v string) bool {
	if v == "vertex-2023-10-16" {
		return true
	}
	_, err := time.Parse("2006-01-02", v)
	return err == nil
}

// vertexCountTokens answers count-tokens:rawPredict, Vertex's
// count_tokens for Anthropic models: the body names the model. Like
// POST /v1/messages/count_tokens it is a lookup, with its own rules.
func (m *Mock) vertexCountTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	m.lookup()
	x := &exchange{m: m, c: vertexAnthropic{v: m.vertex}, w: w, r: r}
	if !m.vertex.check(x) {
		return
	}
	a, in, err := decodeAnthropicPrompt(body, false)
	if err == nil && in.Model == "" {
		err = refusal("model: Field required")
	}
	if err != nil {
		anError(w, 400, "invalid_request_error", err.Error())
		return
	}
	if f := m.countFault(in.Model, r.Header.Get("Idempotency-Key")); f != nil {
		switch f.Type {
		case FaultStatus, FaultAuth:
			x.c.fail(x, f)
			return
		case FaultReset:
			reset(w)
			return
		case FaultHang:
			x.block(nil)
			return
		}
	}
	writeJSON(w, 200, map[string]int64{"input_tokens": a.promptTokens + CountOverhead})
}
