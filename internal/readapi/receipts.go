package readapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The receipts endpoints (docs/receipts.md): one receipt, sealed, or the
// newest a key may read.

// listReceipts loads the tenant's receipts, newest first, continuing
// after the request id `after`.
func (a *API) listReceipts(ctx context.Context, tenant string, limit int, after string) ([]*receipt.Receipt, error) {
	bodies, err := a.store.Receipts(ctx, tenant, limit, after)
	if err != nil {
		return nil, err
	}
	out := make([]*receipt.Receipt, 0, len(bodies))
	for _, b := range bodies {
		r, err := receipt.Parse(b)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// serveReceipt answers GET /v1/receipts/{id}: a tenant's key reads its
// own receipts, a virtual key those of its own requests, the admin key
// every tenant's (docs/receipts.md).
func (a *API) serveReceipt(w http.ResponseWriter, r *http.Request, s readScope) {
	rc, err := a.scopedReceipt(r.Context(), s, r.PathValue("id"))
	if err != nil {
		a.receiptError(w, r, err)
		return
	}
	body, err := sealed(rc)
	if err != nil {
		api.Errorf(api.CodeInternal, "encode receipt").Write(w, api.ProtocolOf(r), api.Meta{})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// serveReceipts answers GET /v1/receipts?limit=&after=&tenant=: the
// newest receipts a key may read (a virtual key's own), the admin key's
// across tenants.
func (a *API) serveReceipts(w http.ResponseWriter, r *http.Request, scope readScope) {
	limit := 20
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			api.Errorf(api.CodeInvalidRequest, "limit must be an integer in [1, 1000]").Write(w, api.ProtocolOf(r), api.Meta{})
			return
		}
		limit = n
	}
	tenants, apiErr := scope.filter(a.gw.Policy(), r.URL.Query().Get("tenant"))
	if apiErr != nil {
		apiErr.Write(w, api.ProtocolOf(r), api.Meta{})
		return
	}
	list, err := a.newestReceipts(r.Context(), scope, tenants, limit, r.URL.Query().Get("after"))
	if err != nil {
		api.StoreUnavailable(err).Write(w, api.ProtocolOf(r), api.Meta{})
		return
	}
	last := ""
	if len(list) > 0 {
		last = list[len(list)-1].RequestID
	}
	for _, r := range list {
		if err := r.Seal(); err != nil {
			api.Errorf(api.CodeInternal, "seal receipt").Write(w, provider.OpenAI, api.Meta{})
			return
		}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": list, "has_more": len(list) == limit, "last_id": last})
}

// sealed computes a receipt's digests and returns its canonical JSON.
func sealed(r *receipt.Receipt) ([]byte, error) {
	if err := r.Seal(); err != nil {
		return nil, err
	}
	return r.Canonical()
}
