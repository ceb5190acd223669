package azure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Token timing. A token is refreshed in the background once it has less
// than refreshEarly left (or once its refresh_in time has come), and is
// no longer used once it has less than minValidity left, so that it
// cannot expire in flight. refreshEarly is the Azure SDK's own margin:
// its cache hands out a token until five minutes before its expiry, so a
// refresh asked for any earlier would only get the same token back.
const (
	refreshEarly   = 5 * time.Minute
	minValidity    = 30 * time.Second
	tokenFetchTime = 30 * time.Second // bounds one fetch through the chain
)

// tokens hands out Microsoft Entra ID access tokens for Azure OpenAI
// from a credential (the chain of entra.go), one fetch at a time.
//
// The Azure SDK's credentials cache tokens too, but a GetToken call
// holds the credential's lock for as long as the token endpoint takes,
// and waits for it: a slow refresh would block every request behind it.
// So requests never call GetToken: they take the token cached here while
// it is fresh; once it nears its expiry a refresh starts in the
// background and requests go on with the old token while it is still
// valid; a request that has no valid token waits for the fetch at most
// until its own deadline. The fetch itself is bounded by tokenFetchTime,
// never by a request's context, so that one request giving up does not
// fail the fetch the others wait for. Safe for concurrent use.
type tokens struct {
	cred azcore.TokenCredential
	now  func() time.Time
	// classify turns a fetch's failure into the error requests get.
	classify func(error) error

	mu       sync.Mutex
	last     azcore.AccessToken // zero until the first fetch succeeds
	inflight chan struct{}      // closed when the running fetch ends
	lastErr  error
}

// fresh reports whether tok needs no refresh at now.
func fresh(tok azcore.AccessToken, now time.Time) bool {
	if tok.Token == "" || tok.ExpiresOn.Sub(now) <= refreshEarly {
		return false
	}
	return tok.RefreshOn.IsZero() || now.Before(tok.RefreshOn)
}

// usable reports whether tok may still be sent at now.
func usable(tok azcore.AccessToken, now time.Time) bool {
	return tok.Token != "" && tok.ExpiresOn.Sub(now) > minValidity
}

// token returns a valid access token, waiting at most until ctx is done.
// Its error is classify's reading of the fetch's failure.
func (t *tokens) token(ctx context.Context) (string, error) {
	t.mu.Lock()
	now := t.now()
	if fresh(t.last, now) {
		tok := t.last.Token
		t.mu.Unlock()
		return tok, nil
	}
	done := t.refreshLocked()
	if usable(t.last, now) {
		// Still good: use it while the refresh runs.
		tok := t.last.Token
		t.mu.Unlock()
		return tok, nil
	}
	t.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return "", fmt.Errorf("azure: waiting for a Microsoft Entra ID token: %w", context.Cause(ctx))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if usable(t.last, t.now()) {
		return t.last.Token, nil
	}
	if t.lastErr != nil {
		return "", t.lastErr
	}
	return "", errors.New("azure: Microsoft Entra ID returned an expired token")
}

// refreshLocked starts a fetch unless one is running and returns the
// channel that closes when it ends. t.mu is held.
func (t *tokens) refreshLocked() <-chan struct{} {
	if t.inflight != nil {
		return t.inflight
	}
	done := make(chan struct{})
	t.inflight = done
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), tokenFetchTime)
		tok, err := t.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{Scope}})
		cancel()
		t.mu.Lock()
		defer t.mu.Unlock()
		t.inflight = nil
		switch {
		case err != nil:
			t.lastErr = t.classify(err)
		case tok.Token == "":
			t.lastErr = fmt.Errorf("%w: no access token in its answer", ErrTokenRefused)
		default:
			t.last, t.lastErr = tok, nil
		}
		close(done)
	}()
	return done
}
