package gateway

import (
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// serveModel handles GET /v1/models/{id}: one alias the tenant may use, in
// the OpenAI shape or (for the Anthropic SDK) the Anthropic one.
func (g *Gateway) serveModel(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	p := protocolOf(r)
	a := g.policy().Alias(r.PathValue("id"))
	if a == nil || len(a.Ineligible(policy.Needs{}, t.MaxBoundary)) == len(a.Routes) {
		modelNotFound(r.PathValue("id")).Write(w, p, api.Meta{})
		return
	}
	if p == provider.Anthropic {
		writeJSON(w, http.StatusOK, map[string]any{"id": a.Name, "type": "model", "display_name": a.Name, "created_at": "2026-01-01T00:00:00Z"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": a.Name, "object": "model", "created": 1767225600, "owned_by": "oncegate"})
}
