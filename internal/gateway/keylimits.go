package gateway

import (
	"net/http"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/policy"
)

// A virtual key narrows its tenant (docs/keys-and-teams.md): its
// limits, and its team's tokens per minute, are the key ring's
// (keyring.Use); here the request path counts a request in progress for
// its key and checks a new request against them before it is placed.

// enterBoth counts a request in progress for its tenant t and for the
// virtual key it authenticated with, if any (lk), until release is
// called; or refuses it, before its body is read, when either already has
// its max_concurrent in progress.
func (g *Gateway) enterBoth(r *http.Request, t *policy.Tenant) (lk *keyring.Key, release func(), _ *api.Error) {
	releaseTenant, apiErr := g.enter(t)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if lk = accesslog.KeyOf(r.Context()); lk == nil {
		return nil, releaseTenant, nil
	}
	releaseKey, apiErr := g.keys.Enter(lk)
	if apiErr != nil {
		releaseTenant()
		return nil, nil, apiErr
	}
	return lk, func() { releaseKey(); releaseTenant() }, nil
}

// admitKey checks a new logical request against its virtual key before
// it is placed: gateKey, and whether the cheapest attempt's worst case
// still fits under the key's cost and tokens (429 with Retry-After).
// Nothing is claimed or sent before it passes.
func (c *call) admitKey(lk *keyring.Key) *api.Error {
	if lk == nil {
		return nil
	}
	if e := c.g.keys.Gate(lk, c.alias.Name); e != nil {
		return e
	}
	c.key = c.g.keys.Use(lk, c.alias.Engine.Deadline)
	return c.key.Refusal(c.cheapestAttempt(), c.keyTokens())
}

// keyTokens is the worst case of one attempt in tokens: the prompt's
// estimate and the output cap.
func (c *call) keyTokens() gw.NanoUSD {
	return gw.NanoUSD(c.rec.R.Request.EstimatedInputTokens + c.maxOutput())
}

// keyIDOf is the id of the virtual key a request authenticated with, ""
// for none.
func keyIDOf(r *http.Request) string {
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		return lk.Stored.ID
	}
	return ""
}

// keyNameOf is the name of the virtual key a request authenticated with.
func keyNameOf(r *http.Request) string {
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		return lk.Stored.Name
	}
	return ""
}
