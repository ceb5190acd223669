package openai

import (
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/oncegate/oncegate/internal/provider"
)

// LookupModel asks for the route's model: GET /models/{model}, under the
// base URL (which ends in /v1), as the OpenAI API and the servers that
// speak it answer (provider.ModelLookup).
func (e *Endpoint) LookupModel(model string) (*provider.Outbound, string) {
	return &provider.Outbound{Method: http.MethodGet, Path: "/models/" + url.PathEscape(model)}, ""
}

// ListModels asks for the list of models, GET /models: what a server
// without the single lookup (vLLM) answers (provider.ModelLister).
func (e *Endpoint) ListModels() *provider.Outbound {
	return &provider.Outbound{Method: http.MethodGet, Path: "/models"}
}

// Listed reports whether a model list ({"data":[{"id":…}]}) holds model.
func (e *Endpoint) Listed(body []byte, model string) bool {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil {
		return false
	}
	for _, m := range list.Data {
		if m.ID == model {
			return true
		}
	}
	return false
}

var (
	_ provider.ModelLookup = (*Endpoint)(nil)
	_ provider.ModelLister = (*Endpoint)(nil)
)
