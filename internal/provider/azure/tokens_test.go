package azure

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// fakeCred is a credential whose every GetToken waits for the test to
// answer it on reply, and reports itself on asked.
type fakeCred struct {
	asked chan struct{}
	reply chan result
	mu    sync.Mutex
	calls int
}

type result struct {
	tok azcore.AccessToken
	err error
}

func newFakeCred() *fakeCred {
	return &fakeCred{asked: make(chan struct{}, 16), reply: make(chan result)}
}

func (f *fakeCred) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if len(o.Scopes) != 1 || o.Scopes[0] != Scope {
		return azcore.AccessToken{}, errors.New("wrong scope")
	}
	f.asked <- struct{}{}
	select {
	case r := <-f.reply:
		return r.tok, r.err
	case <-ctx.Done():
		return azcore.AccessToken{}, ctx.Err()
	}
}

func (f *fakeCred) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// tokenAsync runs t.token in the background.
func tokenAsync(ts *tokens, ctx context.Context) <-chan result {
	out := make(chan result, 1)
	go func() {
		s, err := ts.token(ctx)
		out <- result{tok: azcore.AccessToken{Token: s}, err: err}
	}()
	return out
}

// A token is fetched once and reused while fresh; once it nears its
// expiry the next request still gets it at once while one refresh runs
// in the background, and the refreshed token follows; a token past its
// use-by time makes requests wait for the fetch.
func TestTokensRefreshAheadOfExpiry(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	cred := newFakeCred()
	ts := &tokens{cred: cred, now: clk.now, classify: func(err error) error { return err }}
	ctx := context.Background()

	first := tokenAsync(ts, ctx)
	<-cred.asked
	cred.reply <- result{tok: azcore.AccessToken{Token: "t1", ExpiresOn: t0.Add(time.Hour)}}
	if r := <-first; r.err != nil || r.tok.Token != "t1" {
		t.Fatalf("first token: %+v", r)
	}
	for range 3 {
		if tok, err := ts.token(ctx); err != nil || tok != "t1" {
			t.Fatalf("fresh token: %q %v", tok, err)
		}
	}
	if cred.count() != 1 {
		t.Fatalf("%d fetches for a fresh token, want 1", cred.count())
	}

	// Four minutes left: the token is served and a refresh starts; a
	// second request meanwhile starts no other.
	clk.set(t0.Add(56 * time.Minute))
	for range 2 {
		if tok, err := ts.token(ctx); err != nil || tok != "t1" {
			t.Fatalf("token while refreshing: %q %v", tok, err)
		}
	}
	<-cred.asked
	if cred.count() != 2 {
		t.Fatalf("%d fetches, want 2 (one refresh)", cred.count())
	}
	cred.reply <- result{tok: azcore.AccessToken{Token: "t2", ExpiresOn: t0.Add(2 * time.Hour)}}
	waitToken(t, ts, "t2")

	// Past its use-by time with no refresh done: the request waits.
	clk.set(t0.Add(2*time.Hour - 10*time.Second))
	late := tokenAsync(ts, ctx)
	<-cred.asked
	cred.reply <- result{tok: azcore.AccessToken{Token: "t3", ExpiresOn: t0.Add(3 * time.Hour)}}
	if r := <-late; r.err != nil || r.tok.Token != "t3" {
		t.Fatalf("token after expiry: %+v", r)
	}
}

// waitToken waits for the running refresh to end, then holds ts to
// handing out want.
func waitToken(t *testing.T, ts *tokens, want string) {
	t.Helper()
	ts.mu.Lock()
	done := ts.inflight
	ts.mu.Unlock()
	if done != nil {
		<-done
	}
	if tok, err := ts.token(context.Background()); err != nil || tok != want {
		t.Fatalf("token %q %v, want %q", tok, err, want)
	}
}

// A token's refresh_in time starts a refresh even when it is far from
// expiry.
func TestTokensRefreshOn(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	cred := newFakeCred()
	ts := &tokens{cred: cred, now: clk.now, classify: func(err error) error { return err }}
	r := tokenAsync(ts, context.Background())
	<-cred.asked
	cred.reply <- result{tok: azcore.AccessToken{Token: "t1", ExpiresOn: t0.Add(24 * time.Hour), RefreshOn: t0.Add(12 * time.Hour)}}
	<-r
	clk.set(t0.Add(13 * time.Hour))
	if tok, _ := ts.token(context.Background()); tok != "t1" {
		t.Fatalf("token %q", tok)
	}
	<-cred.asked // the refresh
	cred.reply <- result{tok: azcore.AccessToken{Token: "t2", ExpiresOn: t0.Add(48 * time.Hour)}}
	waitToken(t, ts, "t2")
}

// A request without a valid token waits for the fetch no longer than its
// own deadline, while the fetch goes on; a failed fetch is the
// classified error of the request waiting for it, and the next request
// tries again.
func TestTokensNeverWaitPastTheDeadline(t *testing.T) {
	cred := newFakeCred()
	refused := errors.New("refused")
	ts := &tokens{cred: cred, now: time.Now, classify: func(error) error { return refused }}
	ctx, cancel := context.WithCancel(context.Background())
	r := tokenAsync(ts, ctx)
	<-cred.asked
	cancel() // the request's deadline, while the token endpoint is silent
	if res := <-r; res.err == nil || !errors.Is(res.err, context.Canceled) {
		t.Fatalf("gave up: %+v", res)
	}
	ts.mu.Lock()
	fetch := ts.inflight
	ts.mu.Unlock()
	if fetch == nil {
		t.Fatal("the fetch ended with the request that started it")
	}
	cred.reply <- result{err: errors.New("late answer")}
	<-fetch

	second := tokenAsync(ts, context.Background())
	<-cred.asked
	cred.reply <- result{err: errors.New("the endpoint said no")}
	if res := <-second; !errors.Is(res.err, refused) {
		t.Fatalf("failed fetch: %+v", res)
	}
	third := tokenAsync(ts, context.Background())
	<-cred.asked
	cred.reply <- result{tok: azcore.AccessToken{Token: "ok", ExpiresOn: time.Now().Add(time.Hour)}}
	if res := <-third; res.err != nil || res.tok.Token != "ok" {
		t.Fatalf("retry: %+v", res)
	}
	if cred.count() != 3 {
		t.Fatalf("%d fetches, want 3", cred.count())
	}
}
