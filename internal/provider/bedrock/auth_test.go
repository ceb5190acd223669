package bedrock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/oncegate/oncegate/internal/gw"
)

// fakeCreds is a credentials provider whose every Retrieve takes the next
// credentials from a channel, so a test decides when a refresh finishes.
type fakeCreds struct {
	next  chan aws.Credentials
	mu    sync.Mutex
	calls int
}

func (f *fakeCreds) Retrieve(ctx context.Context) (aws.Credentials, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	select {
	case c := <-f.next:
		return c, nil
	case <-ctx.Done():
		return aws.Credentials{}, ctx.Err()
	}
}

func (f *fakeCreds) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func expiring(key string, in time.Duration) aws.Credentials {
	return aws.Credentials{AccessKeyID: key, SecretAccessKey: "secret-" + key, SessionToken: "token-" + key,
		CanExpire: true, Expires: time.Now().Add(in), Source: "fake"}
}

// cancelled is a context that has already ended: a Retrieve given it
// returns at once unless it has credentials to return without waiting.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestRefreshBeforeExpiry: credentials inside the refresh window (here 4
// minutes from expiry) are still used — a request never waits — while one
// background refresh fetches the next ones, which later requests get.
func TestRefreshBeforeExpiry(t *testing.T) {
	f := &fakeCreds{next: make(chan aws.Credentials, 1)}
	f.next <- expiring("A", 4*time.Minute)
	a := NewAuthWith("us-east-1", f)
	done := make(chan error, 1)
	a.refreshed = func(err error) { done <- err }

	c, err := a.Retrieve(context.Background())
	if err != nil || c.AccessKeyID != "A" {
		t.Fatalf("first: %v %v", c.AccessKeyID, err)
	}
	// The refresh is blocked in the provider. Requests that cannot wait
	// at all (their context has ended) still get A.
	for range 10 {
		c, err := a.Retrieve(cancelled())
		if err != nil || c.AccessKeyID != "A" {
			t.Fatalf("during the refresh: %q %v", c.AccessKeyID, err)
		}
	}
	f.next <- expiring("B", time.Hour)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c, err = a.Retrieve(cancelled())
	if err != nil || c.AccessKeyID != "B" {
		t.Fatalf("after the refresh: %q %v", c.AccessKeyID, err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("provider asked %d times, want 2 (one refresh for all the requests)", n)
	}
}

// TestRefreshBoundedByDeadline: credentials about to expire (1 minute)
// cannot be used; the request waits for the refresh, but only until its
// own context ends, and the refresh goes on for the next request.
func TestRefreshBoundedByDeadline(t *testing.T) {
	f := &fakeCreds{next: make(chan aws.Credentials, 1)}
	f.next <- expiring("A", time.Minute)
	a := NewAuthWith("us-east-1", f)
	if c, err := a.Retrieve(context.Background()); err != nil || c.AccessKeyID != "A" {
		t.Fatalf("first: %q %v", c.AccessKeyID, err)
	}
	_, err := a.Retrieve(cancelled())
	var ce *CredentialError
	if !errors.As(err, &ce) {
		t.Fatalf("a request past its deadline: %v", err)
	}
	if k, _ := ce.Kind(); k != gw.KindTimeoutBeforeResponse {
		t.Errorf("kind %s", k)
	}
	f.next <- expiring("B", time.Hour)
	c, err := a.Retrieve(context.Background())
	if err != nil || c.AccessKeyID != "B" {
		t.Fatalf("next request: %q %v", c.AccessKeyID, err)
	}
	if n := f.count(); n != 2 {
		t.Errorf("provider asked %d times, want 2", n)
	}
}

func TestInvalidate(t *testing.T) {
	f := &fakeCreds{next: make(chan aws.Credentials, 2)}
	f.next <- expiring("A", time.Hour)
	f.next <- expiring("B", time.Hour)
	a := NewAuthWith("us-east-1", f)
	c1, _ := a.Retrieve(context.Background())
	a.Invalidate()
	c2, _ := a.Retrieve(context.Background())
	if c1.AccessKeyID != "A" || c2.AccessKeyID != "B" {
		t.Errorf("got %q then %q", c1.AccessKeyID, c2.AccessKeyID)
	}
}

func TestCredentialErrorKind(t *testing.T) {
	e := &CredentialError{Err: errors.New("no EC2 IMDS role found")}
	if k, c := e.Kind(); k != gw.KindAccountRefused || c != gw.CauseUpstreamAuth {
		t.Errorf("%s/%s", k, c)
	}
	e = &CredentialError{Err: &aws.RequestCanceledError{Err: context.DeadlineExceeded}}
	if k, _ := e.Kind(); k != gw.KindTimeoutBeforeResponse {
		t.Errorf("%s", k)
	}
}

func TestSign(t *testing.T) {
	f := &fakeCreds{next: make(chan aws.Credentials, 1)}
	f.next <- expiring("AKIDEXAMPLE", time.Hour)
	a := NewAuthWith("eu-west-3", f)
	body := []byte(`{"messages":[]}`)
	req, _ := http.NewRequest(http.MethodPost, "https://bedrock-runtime.eu-west-3.amazonaws.com"+Path("m:0", false), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := a.Sign(context.Background(), req, body); err != nil {
		t.Fatal(err)
	}
	auth := req.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !strings.Contains(auth, "/eu-west-3/bedrock/aws4_request") ||
		!strings.Contains(auth, "SignedHeaders=") || !strings.Contains(auth, "Signature=") {
		t.Errorf("Authorization %q", auth)
	}
	if req.Header.Get("X-Amz-Date") == "" || req.Header.Get("X-Amz-Security-Token") != "token-AKIDEXAMPLE" {
		t.Errorf("headers %v", req.Header)
	}
	if strings.Contains(auth, "secret-") {
		t.Error("the secret is in the header")
	}
}

// isolate points the AWS SDK at empty configuration files and clears the
// credential variables, so a test sees only what it sets.
func isolate(t *testing.T) string {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return dir
}

func TestNewAuthChain(t *testing.T) {
	dir := isolate(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	a, err := NewAuth(context.Background(), Config{Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if src, err := a.Check(context.Background()); err != nil || src != "EnvConfigCredentials" {
		t.Errorf("env: %q %v", src, err)
	}

	creds := "[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = team-secret\n"
	if err := os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err = NewAuth(context.Background(), Config{Region: "us-east-1", Profile: "team"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Retrieve(context.Background())
	if err != nil || c.AccessKeyID != "AKIDTEAM" {
		t.Errorf("profile: %q %v", c.AccessKeyID, err)
	}
	if _, err := NewAuth(context.Background(), Config{Region: "us-east-1", Profile: "nobody"}); err == nil {
		t.Error("a missing profile was accepted")
	}
	if _, err := NewAuth(context.Background(), Config{}); err == nil {
		t.Error("no region was accepted")
	}
}

func TestConfig(t *testing.T) {
	if got := (Config{Region: "eu-central-1"}).Endpoint(); got != "https://bedrock-runtime.eu-central-1.amazonaws.com" {
		t.Error(got)
	}
	if got := (Config{Region: "x", BaseURL: "http://127.0.0.1:9/"}).Endpoint(); got != "http://127.0.0.1:9" {
		t.Error(got)
	}
	for _, bad := range []Config{{}, {Region: "us-east-1/../x"}, {Region: "us-east-1", BaseURL: "ftp://x"}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestSignatureVerifies sends a signed request over real HTTP, with a
// model ARN in the path, to a server that recomputes the signature from
// what it received (its signed headers, body and path) with the secret.
func TestSignatureVerifies(t *testing.T) {
	const secret = "secret-AKIDEXAMPLE"
	var verdict string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		_, signed, _ := strings.Cut(auth, "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
		at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil {
			verdict = "no date"
			return
		}
		again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
		for _, h := range strings.Split(signed, ";") {
			if h != "host" {
				again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
			}
		}
		sum := sha256.Sum256(body)
		creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: secret, SessionToken: "token-AKIDEXAMPLE"}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "bedrock", "us-west-2", at); err != nil {
			verdict = err.Error()
			return
		}
		if again.Header.Get("Authorization") != auth {
			verdict = "signature mismatch:\n " + auth + "\n " + again.Header.Get("Authorization")
			return
		}
		verdict = "ok"
	}))
	defer srv.Close()

	f := &fakeCreds{next: make(chan aws.Credentials, 1)}
	f.next <- expiring("AKIDEXAMPLE", time.Hour)
	a := NewAuthWith("us-west-2", f)
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+Path("arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-v1:0", true), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "og-1")
	if err := a.Sign(context.Background(), req, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if verdict != "ok" {
		t.Fatal(verdict)
	}
}
