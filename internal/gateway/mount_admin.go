package gateway

import (
	"context"
	"net/http"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/readapi"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The admin API (internal/admin, docs/keys-and-teams.md) is served from the
// gateway's router but knows the gateway only through the narrow view
// below: the policy in force, who a request is, and the key cache.

// apiHost is the gateway as the packages it mounts see it.
type apiHost struct{ g *Gateway }

var _ admin.Gateway = apiHost{}

// Policy is the policy in force.
func (h apiHost) Policy() *policy.Policy { return h.g.policy() }

// AdminEnabled reports whether an admin key is configured.
func (h apiHost) AdminEnabled() bool { return h.g.cur.Load().adminKey != "" }

// IsAdmin reports whether r carries the admin key.
func (h apiHost) IsAdmin(r *http.Request) bool { return h.g.isAdmin(r) }

// IsTenant reports whether r carries a tenant's key or a live virtual key.
func (h apiHost) IsTenant(r *http.Request) bool { return h.g.tenant(r) != nil }

// KeyChanged drops key id here and tells the other replicas.
func (h apiHost) KeyChanged(ctx context.Context, id string) { h.g.keys.Changed(ctx, id) }

// TenantChanged drops team id here and tells the other replicas.
func (h apiHost) TenantChanged(ctx context.Context, id string) { h.g.keys.TeamChanged(ctx, id) }

// adminAPI is the admin API over g.
func (g *Gateway) adminAPI() *admin.API {
	return admin.New(admin.Deps{Gateway: apiHost{g}, Store: g.ledger, Clock: g.clock, Log: g.log, Metrics: g.metrics, Secret: g.secret})
}

// The read APIs (internal/readapi: receipts, models, the console) see the
// same view, with who the caller is and its receipts, and the guards the
// live panel shows.

var _ readapi.Gateway = apiHost{}

// Caller authenticates r: its tenant and virtual key id.
func (h apiHost) Caller(r *http.Request) (*policy.Tenant, string) {
	t := h.g.tenant(r)
	if t == nil {
		return nil, ""
	}
	return t, keyIDOf(r)
}

// MayUse reports whether r's virtual key, if any, may use model alias.
func (h apiHost) MayUse(r *http.Request, alias string) bool {
	lk := accesslog.KeyOf(r.Context())
	return lk == nil || h.g.keys.Allows(lk, alias)
}

// Receipt loads one of tenant's receipts, rebuilt if recovery settled
// its request before it was written.
func (h apiHost) Receipt(ctx context.Context, tenant, id string) (*receipt.Receipt, error) {
	return h.g.receipt(ctx, tenant, id)
}

// readAPI is the read APIs over g.
func (g *Gateway) readAPI() *readapi.API {
	d := readapi.Deps{Gateway: apiHost{g}, Store: g.ledger, Metrics: g.metrics, Load: g.load}
	if bs, ok := g.breakers.(breaker.StateLister); ok {
		d.Breakers = bs
	}
	if b, ok := g.budget.(readapi.Headroom); ok {
		d.Budget = b
	}
	return readapi.New(d)
}
