package anthropic

import (
	"net/http"
	"net/url"

	"github.com/oncegate/oncegate/internal/provider"
)

// LookupModel asks for the route's model: GET /v1/models/{model_id}
// (provider.ModelLookup). A missing one is 404 not_found_error.
func (e *Endpoint) LookupModel(model string) (*provider.Outbound, string) {
	h := http.Header{}
	h.Set("anthropic-version", provider.AnthropicVersion)
	return &provider.Outbound{Method: http.MethodGet, Path: "/v1/models/" + url.PathEscape(model), Header: h}, ""
}

var _ provider.ModelLookup = (*Endpoint)(nil)
