package gateway

import (
	"context"
	"net/http"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/policy"
)

// boundaryOf names whose data boundary the tenant t of request r
// carries, as a route's refusal says it: its virtual key's when the key
// narrowed its tenant's, "" for the tenant's own.
func (g *Gateway) boundaryOf(r *http.Request, t *policy.Tenant) string {
	lk := accesslog.KeyOf(r.Context())
	if lk == nil || lk.Boundary == 0 || lk.Boundary != t.MaxBoundary {
		return ""
	}
	if base := g.policy().Tenant(t.ID); base == nil || base.MaxBoundary <= lk.Boundary {
		return ""
	}
	return "virtual key " + lk.Stored.ID + "'s"
}

// virtualTenant authenticates a virtual key's secret: its tenant, narrowed
// by the key, and the key; nil when the secret is no usable key (or the
// store cannot be asked: the refusal is logged).
func (g *Gateway) virtualTenant(ctx context.Context, secret string) (*policy.Tenant, *keyring.Key) {
	lk, err := g.keys.Lookup(ctx, secret)
	if err != nil {
		g.store.Failed(err)
		return nil, nil
	}
	if lk == nil {
		return nil, nil
	}
	t, err := g.keys.Tenant(ctx, lk)
	if err != nil {
		g.store.Failed(err)
		return nil, nil
	}
	if t == nil {
		return nil, nil
	}
	return t, lk
}
