package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/httpfront"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/memtune"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// enterTenant starts stage 1 of an API request: it finds the tenant (or
// virtual key) by the request's key and counts the request against their
// limits until release is called — before the body is read.
func (g *Gateway) enterTenant(r *http.Request) (*policy.Tenant, *keyring.Key, func(), *api.Error) {
	t := g.tenant(r)
	if t == nil {
		return nil, nil, nil, api.Errorf(api.CodeUnauthorized, "missing or unknown API key")
	}
	lk, release, apiErr := g.enterBoth(r, t)
	if apiErr != nil {
		return nil, nil, nil, apiErr
	}
	return t, lk, release, nil
}

// enter counts a request of tenant t in progress until release is
// called, or refuses it when the tenant already has budget.max_concurrent
// in progress on this gateway — before its body is read, so a burst of
// large requests costs no memory.
func (g *Gateway) enter(t *policy.Tenant) (release func(), _ *api.Error) {
	v, ok := g.running.Load(t.ID)
	if !ok {
		v, _ = g.running.LoadOrStore(t.ID, new(atomic.Int64))
	}
	n := v.(*atomic.Int64)
	if running := n.Add(1); t.MaxConcurrent > 0 && running > int64(t.MaxConcurrent) {
		n.Add(-1)
		g.metrics.ObserveTenantRejection(t.ID, api.CodeTenantConcurrency)
		e := api.Errorf(api.CodeTenantConcurrency, "tenant %s has %d requests in progress, its limit on this gateway", t.ID, t.MaxConcurrent)
		e.RetryAfter = 1
		return nil, e
	}
	return func() { n.Add(-1) }, nil
}

// admitted is what stage 1 hands to stage 2: a request read, parsed and
// allowed to a tenant, with nothing yet decided about which logical
// request it is.
type admitted struct {
	proto      provider.Protocol
	tenant     *policy.Tenant
	alias      *policy.Alias
	parsed     *provider.ClientRequest
	requestSHA string // the digest of the body's canonical JSON
	key        string // the Idempotency-Key; "" when none was sent
}

// admit is stage 1 after the tenant's limits: it reads and checks a
// request. Every rejection names what was wrong.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, p provider.Protocol, t *policy.Tenant) (*admitted, *api.Error) {
	key, body, apiErr := g.readRequest(w, r)
	if apiErr != nil {
		return nil, apiErr
	}
	var err error
	if dep := httpfront.DeploymentOf(r.Context()); dep != "" {
		// An Azure deployment path: the deployment names the alias,
		// whatever the body says (docs/api.md, "Paths").
		if body, err = provider.WithDeployment(body, dep); err != nil {
			return nil, invalidRequest(err)
		}
	}
	cr, err := provider.ParseRequest(p, body)
	if err != nil {
		return nil, invalidRequest(err)
	}
	accesslog.Of(r.Context()).Set(func(a *accesslog.Entry) { a.Model = cr.IR.Model })
	alias := g.policy().Alias(cr.IR.Model)
	if alias == nil {
		return nil, modelNotFound(cr.IR.Model)
	}
	if alias.Stateful {
		return nil, &api.Error{Code: api.CodeInvalidRequest, Param: "model", Message: "the model `" + alias.Name +
			"` keeps its conversations at the provider (openai-responses): use it on POST /v1/responses"}
	}
	canon, err := identity.Canonicalize(body)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidRequest, "request body is not canonical JSON: %v", err)
	}
	return &admitted{proto: p, tenant: t, alias: alias, parsed: cr, requestSHA: identity.SHA256Hex(canon), key: key}, nil
}

// readRequest reads a request's Idempotency-Key (validated when sent)
// and its body, within the body limit.
func (g *Gateway) readRequest(w http.ResponseWriter, r *http.Request) (string, []byte, *api.Error) {
	key := r.Header.Get("Idempotency-Key")
	if _, sent := r.Header["Idempotency-Key"]; sent {
		if err := identity.ValidateKey(key); err != nil {
			return "", nil, &api.Error{Code: api.CodeInvalidKey, Param: "Idempotency-Key", Message: err.Error()}
		}
	}
	if n := r.ContentLength; n >= memtune.LargeBytes && n <= g.policy().Limits.MaxBodyBytes {
		// The body, its parsed text and the upstream request are alive
		// together, and parsing makes transient copies: tell the
		// collector before they exist (docs/performance.md).
		context.AfterFunc(r.Context(), memtune.Hold(4*n))
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, g.policy().Limits.MaxBodyBytes), r.ContentLength, g.policy().Limits.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", nil, api.Errorf(api.CodeRequestTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
		}
		var late *httpfront.BodyTimeout
		if errors.As(err, &late) {
			// What is left of the body may still come: the connection
			// cannot carry another request (docs/api.md, "Limits").
			w.Header().Set("Connection", "close")
			return "", nil, api.Errorf(api.CodeRequestTimeout, "%v", late)
		}
		return "", nil, api.Errorf(api.CodeInvalidRequest, "could not read the request body: %v", err)
	}
	if g.cur.Load().logBodies {
		accesslog.Of(r.Context()).Set(func(a *accesslog.Entry) { a.Body = string(body) })
	}
	return key, body, nil
}

// readBody reads a request body into one buffer of the size its
// Content-Length announces (io.ReadAll would grow one by doubling,
// allocating about twice the body on the way), or by doubling when it
// announces none.
func readBody(r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 || contentLength > limit {
		return io.ReadAll(r)
	}
	// One byte more than announced, so that a body longer than its
	// Content-Length is still read to its end (and refused at the limit).
	buf := make([]byte, 0, contentLength+1)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow: the body is longer than announced
		}
	}
}

// invalidRequest is the 400 for a request body the parser refused.
func invalidRequest(err error) *api.Error { return api.InvalidRequest(err) }

// modelNotFound is the 404 for a model no alias names.
func modelNotFound(model string) *api.Error { return api.ModelNotFound(model) }
