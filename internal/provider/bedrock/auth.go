package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/oncegate/oncegate/internal/gw"
)

// RefreshWindow is how long before they expire cached credentials are
// renewed: the aws.CredentialsCache's ExpiryWindow. In the first half of
// the window requests are still signed with the old credentials while a
// background refresh runs; only in the second half does a request wait for
// new ones — and never past its own deadline.
const RefreshWindow = 5 * time.Minute

// refreshTimeout bounds a background refresh, which no request waits on.
const refreshTimeout = 30 * time.Second

// Auth signs requests with SigV4 for the service "bedrock" in one region,
// with credentials from the AWS default chain (environment, shared config
// and profile, web identity, container and instance roles). It is safe for
// concurrent use.
type Auth struct {
	region string
	signer *v4.Signer
	cache  *aws.CredentialsCache
	// last is the credentials the cache last gave, their Expires moved
	// RefreshWindow earlier by the cache (no jitter), so the real expiry
	// is last.Expires + RefreshWindow.
	last       atomic.Pointer[aws.Credentials]
	refreshing atomic.Bool
	// refreshed, when set, is told each background refresh's result
	// (tests wait on it instead of sleeping).
	refreshed func(error)
}

// NewAuth resolves the AWS default credential chain for cfg (its region
// and, when set, its shared-config profile). No credential is fetched
// yet: web identity and instance roles are asked on first use (or by
// Check). A profile that does not exist is an error now.
func NewAuth(ctx context.Context, cfg Config) (*Auth, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithCredentialsCacheOptions(cacheOptions),
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("bedrock: load AWS configuration: %w", err)
	}
	if awsCfg.Credentials == nil {
		return nil, errors.New("bedrock: no AWS credential provider found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or web identity)")
	}
	return NewAuthWith(cfg.Region, awsCfg.Credentials), nil
}

// NewAuthWith signs for region with credentials from p, cached in an
// aws.CredentialsCache with the refresh window (p itself, when it is
// already such a cache).
func NewAuthWith(region string, p aws.CredentialsProvider) *Auth {
	cache, ok := p.(*aws.CredentialsCache)
	if !ok {
		cache = aws.NewCredentialsCache(p, cacheOptions)
	}
	return &Auth{region: region, cache: cache, signer: v4.NewSigner()}
}

func cacheOptions(o *aws.CredentialsCacheOptions) {
	o.ExpiryWindow = RefreshWindow
	o.ExpiryWindowJitterFrac = 0 // Retrieve relies on the exact window
}

// Retrieve returns credentials to sign with. Fresh cached credentials are
// returned at once. In the first half of the refresh window the cached
// ones (still valid for at least RefreshWindow/2) are returned and one
// background refresh starts. Otherwise the call waits for the refresh,
// but never after ctx ends: the refresh goes on for the next request.
func (a *Auth) Retrieve(ctx context.Context) (aws.Credentials, error) {
	now := time.Now() // the cache judges expiry on the same wall clock
	if c := a.last.Load(); c != nil {
		if !c.CanExpire || now.Before(c.Expires) {
			return *c, nil
		}
		if now.Before(c.Expires.Add(RefreshWindow / 2)) {
			a.prefetch()
			return *c, nil
		}
	}
	c, err := a.cache.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, &CredentialError{Err: err}
	}
	a.last.Store(&c)
	return c, nil
}

// prefetch starts one background refresh unless one is running.
func (a *Auth) prefetch() {
	if !a.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer a.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		defer cancel()
		c, err := a.cache.Retrieve(ctx)
		if err == nil {
			a.last.Store(&c)
		}
		if a.refreshed != nil {
			a.refreshed(err)
		}
	}()
}

// Invalidate forgets the cached credentials, so the next request fetches
// new ones: Bedrock refused them as expired (ExpiredTokenException).
func (a *Auth) Invalidate() {
	a.last.Store(nil)
	a.cache.Invalidate()
}

// Check obtains a credential and says which provider of the chain gave it
// (for `oncegate check --connect`); it never returns the secret.
func (a *Auth) Check(ctx context.Context) (source string, err error) {
	c, err := a.Retrieve(ctx)
	if err != nil {
		return "", err
	}
	return c.Source, nil
}

// Source names the provider of the chain that gave the credentials in
// use ("EnvConfigCredentials" …; "" before the first), never a secret.
func (a *Auth) Source() string {
	if c := a.last.Load(); c != nil {
		return c.Source
	}
	return ""
}

// Sign adds SigV4 headers (Authorization, X-Amz-Date and, with session
// credentials, X-Amz-Security-Token) to req, whose body is body, for the
// service "bedrock". Call it after every other header is set. A failure
// to obtain credentials is a *CredentialError.
func (a *Auth) Sign(ctx context.Context, req *http.Request, body []byte) error {
	creds, err := a.Retrieve(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if err := a.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningName, a.region, time.Now().UTC()); err != nil {
		return fmt.Errorf("bedrock: sign request: %w", err)
	}
	return nil
}

// CredentialError is a failure to obtain credentials for a request. The
// wrapped error never holds a secret (the SDK's provider errors name
// sources, not keys).
type CredentialError struct{ Err error }

func (e *CredentialError) Error() string { return "bedrock: obtain AWS credentials: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *CredentialError) Unwrap() error { return e.Err }

// Kind classifies the failure: the request's own context ending is a
// timeout before any response; anything else means the route has no
// usable credential — its account is refused, and the next route serves.
func (e *CredentialError) Kind() (gw.Kind, gw.Cause) {
	var rc *aws.RequestCanceledError
	if errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded) || errors.As(e.Err, &rc) {
		return gw.KindTimeoutBeforeResponse, ""
	}
	return gw.KindAccountRefused, gw.CauseUpstreamAuth
}
