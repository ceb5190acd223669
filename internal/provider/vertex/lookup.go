package vertex

import (
	"net/http"
	"net/url"

	"github.com/oncegate/oncegate/internal/provider"
)

// LookupModel asks Vertex AI for the route's publisher model:
// GET /v1/publishers/{publisher}/models/{model}, Model Garden's
// publishers.models.get (provider.ModelLookup). It says the model exists
// and the credential may read it; whether the project may call it in the
// route's location, only a call tells.
func (e *Endpoint) LookupModel(model string) (*provider.Outbound, string) {
	return &provider.Outbound{Method: http.MethodGet,
		Path: "/v1/publishers/" + url.PathEscape(e.route.Publisher) + "/models/" + url.PathEscape(model)}, ""
}

var _ provider.ModelLookup = (*Endpoint)(nil)
