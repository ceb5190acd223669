package gateway

import "github.com/oncegate/oncegate/internal/provider"

// scrub redacts every configured secret from a provider's text.
func (g *Gateway) scrub(text string) string { return g.cur.Load().scrub.Text(text) }

// scrubError redacts the configured secrets from every text field of a
// provider's error, in place, before it is kept or passed on.
func (g *Gateway) scrubError(e *provider.UpstreamError) *provider.UpstreamError {
	return g.cur.Load().scrub.Error(e)
}
