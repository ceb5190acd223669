package bedrock

import "github.com/oncegate/oncegate/internal/provider"

// LookupModel cannot ask (provider.ModelLookup): Bedrock answers
// GetFoundationModel and GetInferenceProfile on its control plane
// (bedrock.{region}.amazonaws.com), not on the runtime a route calls,
// and they need IAM permissions the runtime's credential need not have.
// A missing model shows at the first request, as route_unavailable.
func (e *Endpoint) LookupModel(string) (*provider.Outbound, string) {
	return nil, "Bedrock's model lookups (GetFoundationModel, GetInferenceProfile) are on its control plane, not the runtime the route calls, and need their own IAM permissions; a missing model fails over at its first request"
}

var _ provider.ModelLookup = (*Endpoint)(nil)
