package gemini

import (
	"net/http"
	"net/url"

	"github.com/oncegate/oncegate/internal/provider"
)

// LookupModel asks for the route's model: GET /v1beta/models/{model}
// (provider.ModelLookup). A missing one is 404 NOT_FOUND.
func (e *Endpoint) LookupModel(model string) (*provider.Outbound, string) {
	return &provider.Outbound{Method: http.MethodGet, Path: "/v1beta/models/" + url.PathEscape(model)}, ""
}

var _ provider.ModelLookup = (*Endpoint)(nil)
