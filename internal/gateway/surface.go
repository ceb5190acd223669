package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/upstream"
)

// serveModel handles GET /v1/models/{id}: one alias the tenant may use, in
// the OpenAI shape or (for the Anthropic SDK) the Anthropic one.
func (g *Gateway) serveModel(w http.ResponseWriter, r *http.Request, t *policy.Tenant) {
	p := protocolOf(r)
	a := g.policy().Alias(r.PathValue("id"))
	if a == nil || len(a.Ineligible(policy.Needs{}, t.MaxBoundary)) == len(a.Routes) {
		modelNotFound(r.PathValue("id")).write(w, p, meta{})
		return
	}
	if p == provider.Anthropic {
		writeJSON(w, http.StatusOK, map[string]any{"id": a.Name, "type": "model", "display_name": a.Name, "created_at": "2026-01-01T00:00:00Z"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": a.Name, "object": "model", "created": 1767225600, "owned_by": "oncegate"})
}

// serveCountTokens handles POST /v1/messages/count_tokens: the count of
// the first eligible Anthropic route's provider, or, where the alias has
// none (or it did not answer), the gateway's own estimate — labelled in
// the body ("oncegate": {"source": …}) and in X-Oncegate-Token-Count.
func (g *Gateway) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	p := provider.Anthropic
	t := g.tenant(r)
	if t == nil {
		errorf(CodeUnauthorized, "missing or unknown API key").write(w, p, meta{})
		return
	}
	_, body, apiErr := g.readRequest(w, r)
	if apiErr != nil {
		apiErr.write(w, p, meta{})
		return
	}
	ir, err := provider.ParseCountTokens(body)
	if err != nil {
		invalidRequest(err).write(w, p, meta{})
		return
	}
	a := g.policy().Alias(ir.Model)
	if a == nil || a.Stateful {
		modelNotFound(ir.Model).write(w, p, meta{})
		return
	}
	out := ineligibleRoutes(a, t)
	for _, route := range a.Routes {
		if _, no := out[route.ID]; no || route.Provider.Type != policy.TypeAnthropic {
			continue
		}
		if n, ok := g.providerCount(r, route, body); ok {
			w.Header().Set("X-Oncegate-Token-Count", "provider")
			writeJSON(w, http.StatusOK, map[string]any{"input_tokens": n, "oncegate": map[string]string{"source": "provider", "route": route.ID}})
			return
		}
		break
	}
	w.Header().Set("X-Oncegate-Token-Count", "estimate")
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": provider.PromptTokens(ir), "oncegate": map[string]string{"source": "estimate"}})
}

func ineligibleRoutes(a *policy.Alias, t *policy.Tenant) map[string]string {
	return a.Ineligible(policy.Needs{}, t.MaxBoundary)
}

// providerCount asks a route's provider to count a request's tokens.
func (g *Gateway) providerCount(r *http.Request, route *policy.Route, body []byte) (int64, bool) {
	b, err := provider.WithModel(body, route.Model)
	if err != nil {
		return 0, false
	}
	hdr := http.Header{}
	if beta := r.Header.Get("anthropic-beta"); beta != "" {
		hdr.Set("anthropic-beta", beta)
	}
	resp, err := g.cur.Load().clients[route.Provider.ID].Do(r.Context(), &upstream.Request{Path: "/v1/messages/count_tokens", Body: b, Header: hdr})
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	data, err := upstream.ReadAll(resp.Body, 1<<20)
	if err != nil || resp.Status != http.StatusOK {
		g.log.Warn("the provider did not count the tokens; answering the estimate", "route", route.ID, "status", strconv.Itoa(resp.Status))
		return 0, false
	}
	var c struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if json.Unmarshal(data, &c) != nil || c.InputTokens == nil {
		return 0, false
	}
	return *c.InputTokens, true
}
