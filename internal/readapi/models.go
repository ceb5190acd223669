package readapi

import (
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// The model listing (docs/api.md): the aliases a tenant's key may use,
// in the shape of the SDK that asks.

// modelsAuth lets a tenant's key or a virtual key through, with its
// tenant, and the admin key, with none: it sees every alias. Anything
// else is 401.
func (a *API) modelsAuth(h func(http.ResponseWriter, *http.Request, *policy.Tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, _ := a.gw.Caller(r)
		if t == nil && !a.gw.IsAdmin(r) {
			api.Errorf(api.CodeUnauthorized, "missing or unknown API key").Write(w, api.ProtocolOf(r), api.Meta{})
			return
		}
		h(w, r, t)
	}
}

// usable reports whether tenant t (nil: the admin key) may use alias al:
// at least one of its routes is inside t's data boundary.
func usable(al *policy.Alias, t *policy.Tenant) bool {
	return t == nil || len(al.Ineligible(policy.Needs{}, t.MaxBoundary)) < len(al.Routes)
}

// serveModel handles GET /v1/models/{id}: one alias the tenant may use, in
// the OpenAI shape or (for the Anthropic SDK) the Anthropic one.
func (a *API) serveModel(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	p := api.ProtocolOf(r)
	al := a.gw.Policy().Alias(r.PathValue("id"))
	if al == nil || !usable(al, t) || !a.gw.MayUse(r, al.Name) {
		api.ModelNotFound(r.PathValue("id")).Write(w, p, api.Meta{})
		return
	}
	if p == provider.Anthropic {
		api.WriteJSON(w, http.StatusOK, map[string]any{"id": al.Name, "type": "model", "display_name": al.Name, "created_at": "2026-01-01T00:00:00Z"})
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"id": al.Name, "object": "model", "created": 1767225600, "owned_by": "oncegate"})
}

// serveModels lists the aliases the caller may use: those with at least
// one route inside the tenant's data boundary, and, for a virtual key,
// among its models and its team's; to the admin key, every alias.
func (a *API) serveModels(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object,omitempty"`
		Type        string `json:"type,omitempty"`
		Created     int64  `json:"created,omitempty"`
		OwnedBy     string `json:"owned_by,omitempty"`
		DisplayName string `json:"display_name,omitempty"`
		CreatedAt   string `json:"created_at,omitempty"`
	}
	anthropic := api.ProtocolOf(r) == provider.Anthropic
	data := []model{}
	for _, al := range a.gw.Policy().Aliases {
		if !usable(al, t) || !a.gw.MayUse(r, al.Name) {
			continue
		}
		if anthropic {
			data = append(data, model{ID: al.Name, Type: "model", DisplayName: al.Name, CreatedAt: "2026-01-01T00:00:00Z"})
		} else {
			data = append(data, model{ID: al.Name, Object: "model", Created: 1767225600, OwnedBy: "oncegate"})
		}
	}
	var body any = map[string]any{"object": "list", "data": data}
	if anthropic {
		first, last := "", ""
		if len(data) > 0 {
			first, last = data[0].ID, data[len(data)-1].ID
		}
		body = map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last}
	}
	api.WriteJSON(w, http.StatusOK, body)
}
