package vertex

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

func TestURLs(t *testing.T) {
	g := Route{Project: "my-proj", Location: "us-central1", Publisher: PublisherGoogle}
	if got := g.URL("gemini-2.5-flash", false); got != "https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent" {
		t.Errorf("gemini URL %s", got)
	}
	if got := g.URL("gemini-2.5-flash", true); !strings.HasSuffix(got, "/models/gemini-2.5-flash:streamGenerateContent?alt=sse") {
		t.Errorf("gemini stream URL %s", got)
	}
	a := Route{BaseURL: "http://127.0.0.1:9/", Project: "p", Location: "global", Publisher: PublisherAnthropic}
	if got := a.URL("claude-sonnet-4@20250514", false); got != "http://127.0.0.1:9/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict" {
		t.Errorf("anthropic URL %s", got)
	}
	if got := a.URL("claude-sonnet-4@20250514", true); !strings.HasSuffix(got, ":streamRawPredict") {
		t.Errorf("anthropic stream URL %s", got)
	}
	if DefaultBaseURL("global") != "https://aiplatform.googleapis.com" || DefaultBaseURL("europe-west4") != "https://europe-west4-aiplatform.googleapis.com" {
		t.Error("default base URLs")
	}
	for _, bad := range []Route{{Location: "l", Publisher: "google"}, {Project: "p", Publisher: "google"}, {Project: "p", Location: "l", Publisher: "meta"}, {Project: "p/../x", Location: "l", Publisher: "google"}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestAnthropicBody(t *testing.T) {
	in, err := provider.ParseRequest(provider.OpenAI, []byte(`{"model":"chat","stream":true,"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := Route{Project: "p", Location: "us-east5", Publisher: PublisherAnthropic}
	built, err := r.BuildRequest(in, provider.Target{Model: "claude-sonnet-4@20250514", Stream: true, MaxOutputTokens: 1024}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(built.Body, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["model"]; ok || m["anthropic_version"] != AnthropicVersion || m["stream"] != true || m["max_tokens"] != float64(1024) || m["system"] != "S" {
		t.Errorf("rawPredict body %s", built.Body)
	}
	// The client's own Messages body: patched, then rewritten.
	in, _ = provider.ParseRequest(provider.Anthropic, []byte(`{"model":"chat","max_tokens":10,"top_k":5,"messages":[{"role":"user","content":"Hi"}]}`))
	built, err = r.BuildRequest(in, provider.Target{Model: "claude-x"}, nil)
	if err != nil || strings.Contains(string(built.Body), `"model"`) || !strings.Contains(string(built.Body), `"top_k":5`) {
		t.Errorf("native body %s %v", built.Body, err)
	}
	prefix := "Once"
	built, err = r.BuildRequest(in, provider.Target{Model: "claude-x", Continuation: provider.ContinuePrefill}, &prefix)
	if err != nil || !strings.Contains(string(built.Body), `"role":"assistant","content":"Once"`) {
		t.Errorf("prefill body %s %v", built.Body, err)
	}
	// A Gemini model on Vertex uses the gemini codec.
	g := Route{Project: "p", Location: "l", Publisher: PublisherGoogle}
	built, err = g.BuildRequest(in, provider.Target{Model: "gemini-2.5-pro"}, nil)
	if err != nil || !strings.Contains(string(built.Body), `"contents"`) || !strings.Contains(string(built.Body), `"topK":5`) {
		t.Errorf("gemini body %s %v", built.Body, err)
	}
	if g.Continuations() != nil || len(r.Continuations()) != 1 {
		t.Error("continuations")
	}
}

func TestAuthenticate(t *testing.T) {
	h := http.Header{"X-Api-Key": {"client-key"}, "Anthropic-Version": {"2023-06-01"}, "Authorization": {"Bearer client"}}
	Authenticate(h, "ya29.token")
	if h.Get("Authorization") != "Bearer ya29.token" || h.Get("x-api-key") != "" || h.Get("anthropic-version") != "" {
		t.Errorf("headers %v", h)
	}
}

// tokenServer is a Google token endpoint that checks the JWT bearer
// assertion's RS256 signature with the service account's public key.
type tokenServer struct {
	*httptest.Server
	key       *rsa.PrivateKey
	calls     atomic.Int64
	expiresIn int64
	refuse    atomic.Bool
	gate      chan struct{} // when set, a request waits for it
	arrived   chan struct{} // receives once per request, when set
	mu        sync.Mutex
}

func newTokenServer(t *testing.T) *tokenServer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ts := &tokenServer{key: key, expiresIn: 3600}
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) serve(w http.ResponseWriter, r *http.Request) {
	n := ts.calls.Add(1)
	ts.mu.Lock()
	gate, arrived := ts.gate, ts.arrived
	ts.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, 400)
		return
	}
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		http.Error(w, `{"error":"invalid_grant"}`, 400)
		return
	}
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	var claims struct {
		Iss, Scope, Aud string
	}
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(payload, &claims)
	if ts.refuse.Load() || rsa.VerifyPKCS1v15(&ts.key.PublicKey, crypto.SHA256, sum[:], sig) != nil ||
		claims.Iss != "sa@p.iam.gserviceaccount.com" || claims.Scope != Scope || claims.Aud != ts.URL+"/token" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature. secret-ish detail"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"access_token":"ya29.tok-%d","expires_in":%d,"token_type":"Bearer"}`, n, ts.expiresIn)
}

func (ts *tokenServer) keyJSON(t *testing.T) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(ts.key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "kid1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "sa@p.iam.gserviceaccount.com", "token_uri": ts.URL + "/token",
	})
	return b
}

func TestTokensHonourTokenURIAndCache(t *testing.T) {
	ts := newTokenServer(t)
	tokens, err := NewTokens(ts.keyJSON(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tokens.Email != "sa@p.iam.gserviceaccount.com" {
		t.Errorf("email %q", tokens.Email)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := tokens.Token(context.Background())
			if err != nil || tok != "ya29.tok-1" {
				t.Errorf("token %q %v", tok, err)
			}
		}()
	}
	wg.Wait()
	if n := ts.calls.Load(); n != 1 {
		t.Errorf("token endpoint called %d times, want 1 (cached)", n)
	}
}

func TestTokensRefreshEarlyWithoutWaiting(t *testing.T) {
	ts := newTokenServer(t)
	ts.expiresIn = 120 // inside the early-refresh window, yet valid
	tokens, err := NewTokens(ts.keyJSON(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := tokens.Token(context.Background()); err != nil || tok != "ya29.tok-1" {
		t.Fatalf("first token %q %v", tok, err)
	}
	gate := make(chan struct{})
	ts.mu.Lock()
	ts.gate = gate
	ts.mu.Unlock()
	// The refresh hangs at the endpoint; the request goes ahead with the
	// cached, still valid token.
	if tok, err := tokens.Token(context.Background()); err != nil || tok != "ya29.tok-1" {
		t.Fatalf("token during refresh %q %v", tok, err)
	}
	tokens.mu.Lock()
	done := tokens.inflight
	tokens.mu.Unlock()
	if done == nil {
		t.Fatal("no background refresh started")
	}
	close(gate)
	<-done
	if tok, _ := tokens.Token(context.Background()); tok != "ya29.tok-2" {
		t.Errorf("token after refresh %q", tok)
	}
}

func TestTokensNeverWaitPastDeadline(t *testing.T) {
	ts := newTokenServer(t)
	gate, arrived := make(chan struct{}), make(chan struct{}, 1)
	ts.mu.Lock()
	ts.gate, ts.arrived = gate, arrived
	ts.mu.Unlock()
	defer close(gate)
	tokens, err := NewTokens(ts.keyJSON(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tokens.Token(ctx)
		errc <- err
	}()
	<-arrived // the fetch reached the endpoint and hangs there
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want the request's own cancellation", err)
	}
}

func TestTokensRefused(t *testing.T) {
	ts := newTokenServer(t)
	ts.refuse.Store(true)
	tokens, err := NewTokens(ts.keyJSON(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Token(context.Background())
	if !errors.Is(err, ErrTokenRefused) {
		t.Fatalf("err = %v, want ErrTokenRefused", err)
	}
	if k, cause := ClassifyTokenError(err); k != gw.KindAccountRefused || cause != gw.CauseUpstreamAuth {
		t.Errorf("token refusal classified %s/%s", k, cause)
	}
	if s := err.Error(); strings.Contains(s, "secret-ish") || strings.Contains(s, "PRIVATE") {
		t.Errorf("token error leaks the endpoint's text: %s", s)
	}
	// A key for another account type is refused at load.
	if _, err := NewTokens([]byte(`{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}`), nil); err == nil {
		t.Error("an authorized_user file was accepted as a service account")
	}
	if _, err := NewTokens([]byte(`not json`), nil); err == nil {
		t.Error("garbage accepted")
	}
	// An unreachable endpoint is transient, not a refusal.
	ts.Close()
	tokens, _ = NewTokens(ts.keyJSON(t), nil)
	_, err = tokens.Token(context.Background())
	if err == nil || errors.Is(err, ErrTokenRefused) {
		t.Errorf("unreachable endpoint: %v", err)
	}
	if k, _ := ClassifyTokenError(err); k != gw.KindUnavailable {
		t.Errorf("unreachable endpoint classified %s", k)
	}
}

// The rawPredict body written in place is the document the rebuild
// writes, the client's bytes kept where nothing changes; a body it cannot
// split is rebuilt.
func TestRawPredictBodyInPlace(t *testing.T) {
	for _, body := range []string{
		`{"model":"claude-x","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"<b> & \u00e9"}]}`,
		"{\n  \"messages\" : [{\"role\":\"user\",\"content\":\"Hi\"}],\n  \"model\": \"m\",\n  \"max_tokens\": 5\n}",
		`{"max_tokens":5,"messages":[],"anthropic_version":"old","metadata":{"model":"inner"}}`,
		`{"model":"a","\u006dodel":"b","max_tokens":5}`, // an escaped key: rebuilt
	} {
		got, err := RawPredictBody([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		want, err := rebuildRawPredictBody([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("%s:\n in place %s\n rebuilt  %s", body, got, want)
		}
	}
	got, _ := RawPredictBody([]byte(`{"model":"m", "messages":[{"content":"<b>"}]}`))
	if string(got) != `{"messages":[{"content":"<b>"}],"anthropic_version":"`+AnthropicVersion+`"}` {
		t.Fatalf("got %s", got)
	}
}
