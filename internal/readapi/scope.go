package readapi

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Who may read what was recorded (docs/receipts.md, docs/operations.md):
// a tenant's key reads its own receipts and figures, the admin key every
// tenant's; a virtual key reads only the receipts of its own requests
// (docs/keys-and-teams.md, "Ownership"): another key's receipt is answered as one
// that does not exist. The receipts endpoints and the console share this.

// readScope is who is reading: the admin (every tenant), one tenant's
// keys, or one of its virtual keys (key).
type readScope struct {
	admin  bool
	tenant *policy.Tenant
	// key is the virtual key reading ("" for the admin and the tenant's
	// own keys): it reads only its own receipts.
	key string
	// teams are the ids of the teams (docs/keys-and-teams.md, "Teams"),
	// deleted ones too, whose receipts the admin reads beside the file's
	// tenants'.
	teams []string
}

// reads reports whether the scope may read receipt rc of one of its
// tenants.
func (s readScope) reads(rc *receipt.Receipt) bool { return s.key == "" || rc.KeyID == s.key }

// tenants are the tenants the scope may read: the configured ones for
// the admin.
func (s readScope) tenants(pol *policy.Policy) []string {
	if !s.admin {
		return []string{s.tenant.ID}
	}
	ids := make([]string, len(pol.Tenants), len(pol.Tenants)+len(s.teams))
	for i, t := range pol.Tenants {
		ids[i] = t.ID
	}
	for _, id := range s.teams {
		if pol.Tenant(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// filter narrows the scope to ?tenant= when one is given. The admin may
// name any tenant, one no longer configured included (its receipts stay
// in the store); a tenant's key may name only itself.
func (s readScope) filter(pol *policy.Policy, tenant string) ([]string, *api.Error) {
	switch {
	case tenant == "":
		return s.tenants(pol), nil
	case s.admin || tenant == s.tenant.ID:
		return []string{tenant}, nil
	}
	return nil, &api.Error{Code: api.CodeInvalidRequest, Param: "tenant",
		Message: "this key reads only tenant " + s.tenant.ID + "'s receipts; the admin key reads every tenant's"}
}

// readAuth finds the scope of a request — the admin key, else a tenant's
// key — or answers 401 with why.
func (a *API) readAuth(why string, h func(http.ResponseWriter, *http.Request, readScope)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.gw.IsAdmin(r) {
			teams, err := a.store.Tenants(r.Context())
			if err != nil {
				api.StoreUnavailable(err).Write(w, api.ProtocolOf(r), api.Meta{})
				return
			}
			s := readScope{admin: true}
			for _, t := range teams {
				s.teams = append(s.teams, t.ID)
			}
			h(w, r, s)
			return
		}
		if t, key := a.gw.Caller(r); t != nil {
			h(w, r, readScope{tenant: t, key: key})
			return
		}
		api.Errorf(api.CodeUnauthorized, "%s", why).Write(w, api.ProtocolOf(r), api.Meta{})
	}
}

// scopedReceipt finds a receipt the scope may read, sealed: another
// virtual key's is not found.
func (a *API) scopedReceipt(ctx context.Context, s readScope, id string) (*receipt.Receipt, error) {
	for _, tenant := range s.tenants(a.gw.Policy()) {
		rc, err := a.gw.Receipt(ctx, tenant, id)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !s.reads(rc) {
			return nil, ledger.ErrNotFound
		}
		if err := rc.Seal(); err != nil {
			return nil, err
		}
		return rc, nil
	}
	return nil, ledger.ErrNotFound
}

// newestReceipts lists the newest receipts of the tenants the scope may
// read, newest first, at most limit, continuing after the request id
// `after`. Request ids are time-ordered, so one tenant's pages merge into
// another's by id.
func (a *API) newestReceipts(ctx context.Context, s readScope, tenants []string, limit int, after string) ([]*receipt.Receipt, error) {
	var out []*receipt.Receipt
	for _, tenant := range tenants {
		list, err := a.scopedReceipts(ctx, s, tenant, limit, after)
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

// scopedReceipts lists a tenant's newest receipts that the scope may
// read, at most limit, continuing after the request id `after`. A
// virtual key's are found among the tenant's, page by page: the store
// keeps receipts by tenant.
func (a *API) scopedReceipts(ctx context.Context, s readScope, tenant string, limit int, after string) ([]*receipt.Receipt, error) {
	if s.key == "" {
		return a.listReceipts(ctx, tenant, limit, after)
	}
	page := max(limit, receiptPage)
	var out []*receipt.Receipt
	for {
		list, err := a.listReceipts(ctx, tenant, page, after)
		if err != nil {
			return nil, err
		}
		for _, rc := range list {
			if s.reads(rc) {
				if out = append(out, rc); len(out) == limit {
					return out, nil
				}
			}
		}
		if len(list) < page {
			return out, nil
		}
		after = list[len(list)-1].RequestID
	}
}

// receiptPage is how many of a tenant's receipts a virtual key's listing
// reads at a time.
const receiptPage = 200

// receiptError answers a receipt that could not be read: 404 when the
// scope has none by that id, 503 when the store did not answer.
func (a *API) receiptError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ledger.ErrNotFound) {
		api.Errorf(api.CodeReceiptNotFound, "no receipt %q that this key may read", r.PathValue("id")).Write(w, api.ProtocolOf(r), api.Meta{})
		return
	}
	api.StoreUnavailable(err).Write(w, api.ProtocolOf(r), api.Meta{})
}
