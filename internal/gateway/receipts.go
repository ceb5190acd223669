package gateway

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Who may read what was recorded (docs/receipts.md, docs/operations.md):
// a tenant's key reads its own receipts and figures, the admin key every
// tenant's. The receipts endpoints and the console share this.

// readScope is who is reading: the admin (every tenant) or one tenant.
type readScope struct {
	admin  bool
	tenant *policy.Tenant
}

// tenants are the tenants the scope may read: the configured ones for
// the admin.
func (s readScope) tenants(pol *policy.Policy) []string {
	if !s.admin {
		return []string{s.tenant.ID}
	}
	ids := make([]string, len(pol.Tenants))
	for i, t := range pol.Tenants {
		ids[i] = t.ID
	}
	return ids
}

// filter narrows the scope to ?tenant= when one is given. The admin may
// name any tenant, one no longer configured included (its receipts stay
// in the store); a tenant's key may name only itself.
func (s readScope) filter(pol *policy.Policy, tenant string) ([]string, *apiError) {
	switch {
	case tenant == "":
		return s.tenants(pol), nil
	case s.admin || tenant == s.tenant.ID:
		return []string{tenant}, nil
	}
	return nil, &apiError{code: CodeInvalidRequest, param: "tenant",
		message: "this key reads only tenant " + s.tenant.ID + "'s receipts; the admin key reads every tenant's"}
}

// readAuth finds the scope of a request — the admin key, else a tenant's
// key — or answers 401 with why.
func (g *Gateway) readAuth(why string, h func(http.ResponseWriter, *http.Request, readScope)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.isAdmin(r) {
			h(w, r, readScope{admin: true})
			return
		}
		if t := g.tenant(r); t != nil {
			h(w, r, readScope{tenant: t})
			return
		}
		errorf(CodeUnauthorized, "%s", why).write(w, protocolOf(r), meta{})
	}
}

// scopedReceipt finds a receipt the scope may read, sealed.
func (g *Gateway) scopedReceipt(ctx context.Context, s readScope, id string) (*receipt.Receipt, error) {
	for _, tenant := range s.tenants(g.policy()) {
		rc, err := g.receipt(ctx, tenant, id)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := rc.Seal(); err != nil {
			return nil, err
		}
		return rc, nil
	}
	return nil, ledger.ErrNotFound
}

// newestReceipts lists the tenants' newest receipts, newest first, at
// most limit, continuing after the request id `after`. Request ids are
// time-ordered, so one tenant's pages merge into another's by id.
func (g *Gateway) newestReceipts(ctx context.Context, tenants []string, limit int, after string) ([]*receipt.Receipt, error) {
	var out []*receipt.Receipt
	for _, tenant := range tenants {
		list, err := g.listReceipts(ctx, tenant, limit, after)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	if len(tenants) > 1 {
		slices.SortFunc(out, func(a, b *receipt.Receipt) int { return cmp.Compare(b.RequestID, a.RequestID) })
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// receiptError answers a receipt that could not be read: 404 when the
// scope has none by that id, 503 when the store did not answer.
func (g *Gateway) receiptError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ledger.ErrNotFound) {
		errorf(CodeReceiptNotFound, "no receipt %q that this key may read", r.PathValue("id")).write(w, protocolOf(r), meta{})
		return
	}
	storeAPIError(err).write(w, protocolOf(r), meta{})
}
