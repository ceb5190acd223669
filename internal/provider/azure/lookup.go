package azure

import "github.com/oncegate/oncegate/internal/provider"

// LookupModel cannot ask (provider.ModelLookup): a resource's deployments
// are listed only by Azure Resource Manager (management.azure.com), which
// the resource's api-key cannot read, nor a token for the resource's own
// scope (auth: entra) — the data plane's own deployments
// API was retired, and its models list names base models, not
// deployments. A missing deployment shows at the first request, as
// route_unavailable.
func (e *Endpoint) LookupModel(string) (*provider.Outbound, string) {
	return nil, "Azure lists a resource's deployments only through Azure Resource Manager, which the route's credential (its api-key, or its token for Azure OpenAI alone) cannot read; a missing deployment fails over at its first request"
}

var _ provider.ModelLookup = (*Endpoint)(nil)
