package vertex

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/oncegate/oncegate/internal/gw"
)

// Scope is the OAuth2 scope Vertex AI needs.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// Token timing: a token is refreshed in the background once it has less
// than refreshEarly left, and is no longer used once it has less than
// minValidity left (so it cannot expire in flight).
const (
	refreshEarly   = 5 * time.Minute
	minValidity    = 30 * time.Second
	tokenFetchTime = 30 * time.Second // bounds one call to the token endpoint
)

// ErrTokenRefused is wrapped by a token error when the token endpoint
// answered and refused the credential (a revoked key, a deleted service
// account, a bad signature): the route's account is refused.
// It wraps gw.ErrCredentialRefused, which the gateway's transport
// classifies as the route's account refused.
var ErrTokenRefused = fmt.Errorf("vertex: the token endpoint refused the service account: %w", gw.ErrCredentialRefused)

// Tokens hands out OAuth2 access tokens for a service account. Tokens
// come from golang.org/x/oauth2/google (which signs the JWT assertion and
// posts it to the key file's token_uri) through
// oauth2.ReuseTokenSourceWithExpiry, so one is cached until refreshEarly
// before its expiry. A request never waits for a refresh longer than its
// own deadline, and while the cached token is still valid a refresh
// happens in the background and the request goes ahead with it. Safe for
// concurrent use.
type Tokens struct {
	src   oauth2.TokenSource
	now   func() time.Time
	Email string // the service account, for `check --connect` (not secret)

	mu       sync.Mutex
	last     *oauth2.Token
	inflight chan struct{} // closed when the running fetch ends
	lastErr  error
}

// NewTokens reads a service-account key file's JSON. client makes the
// calls to the token endpoint (nil: a client with a 30 s timeout).
func NewTokens(keyJSON []byte, client *http.Client) (*Tokens, error) {
	if client == nil {
		client = &http.Client{Timeout: tokenFetchTime}
	}
	// The context only carries the HTTP client: it is kept by the token
	// source for every later refresh, so it must never be cancelled.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, client)
	creds, err := google.CredentialsFromJSONWithType(ctx, keyJSON, google.ServiceAccount, Scope)
	if err != nil {
		return nil, fmt.Errorf("vertex: service account key: %w", err)
	}
	var meta struct {
		Email string `json:"client_email"`
	}
	_ = jsonUnmarshal(keyJSON, &meta)
	return &Tokens{src: oauth2.ReuseTokenSourceWithExpiry(nil, creds.TokenSource, refreshEarly), now: time.Now, Email: meta.Email}, nil
}

// Token returns a valid access token, waiting at most until ctx is done.
// An error wrapping ErrTokenRefused means the token endpoint refused the
// credential; any other error (the endpoint unreachable, ctx done) is
// transient.
func (t *Tokens) Token(ctx context.Context) (string, error) {
	t.mu.Lock()
	if tok := t.last; tok != nil && tok.Expiry.Sub(t.now()) > refreshEarly {
		t.mu.Unlock()
		return tok.AccessToken, nil
	}
	done := t.refreshLocked()
	if tok := t.last; tok != nil && tok.Expiry.Sub(t.now()) > minValidity {
		// Still good: use it while the refresh runs.
		t.mu.Unlock()
		return tok.AccessToken, nil
	}
	t.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return "", fmt.Errorf("vertex: waiting for an access token: %w", ctx.Err())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok := t.last; tok != nil && tok.Expiry.Sub(t.now()) > minValidity {
		return tok.AccessToken, nil
	}
	if t.lastErr != nil {
		return "", t.lastErr
	}
	return "", errors.New("vertex: the token endpoint returned an expired token")
}

// refreshLocked starts a fetch unless one is running and returns the
// channel that closes when it ends. t.mu is held.
func (t *Tokens) refreshLocked() <-chan struct{} {
	if t.inflight != nil {
		return t.inflight
	}
	done := make(chan struct{})
	t.inflight = done
	go func() {
		tok, err := t.src.Token()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.inflight = nil
		switch {
		case err != nil:
			t.lastErr = tokenError(err)
		case tok == nil || tok.AccessToken == "":
			t.lastErr = fmt.Errorf("%w: no access token in its answer", ErrTokenRefused)
		default:
			if tok.Expiry.IsZero() {
				tok.Expiry = t.now().Add(time.Hour)
			}
			t.last, t.lastErr = tok, nil
		}
		close(done)
	}()
	return done
}

// tokenError names a token failure without its secrets: an answer of the
// token endpoint (oauth2.RetrieveError) is a refusal and keeps only the
// status and OAuth error code, never the body.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if status >= 500 || status == http.StatusTooManyRequests {
			return fmt.Errorf("vertex: the token endpoint is unavailable (HTTP %d)", status)
		}
		return fmt.Errorf("%w (HTTP %d %s)", ErrTokenRefused, status, reasonWord(re.ErrorCode))
	}
	return fmt.Errorf("vertex: fetching an access token: %w", err)
}

// ClassifyTokenError maps a failure to obtain a token to the attempt's
// outcome: the token endpoint's refusal refuses the route's account; a
// token endpoint that cannot be reached makes the route unavailable.
func ClassifyTokenError(err error) (gw.Kind, gw.Cause) {
	if errors.Is(err, ErrTokenRefused) {
		return gw.KindAccountRefused, gw.CauseUpstreamAuth
	}
	return gw.KindUnavailable, ""
}
