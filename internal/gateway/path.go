package gateway

import (
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/provider"
)

// A request for an answer passes six stages, each in a file of its own
// and each handing the next a narrow value (docs/architecture.md draws
// them):
//
//  1. admit     (admit.go)    the tenant, its limits, the body read and
//     parsed, the alias allowed                                 → *admitted
//  2. identify  (identify.go) its identity, deadline, receipt header and
//     ineligible routes                                         → *call
//  3. place     (place.go)    owner or joiner of its flight; the owner
//     takes one of two ways, below                              → a flight
//  4. attempts  (attempts.go, claim.go) the durable claim, then the
//     engine's attempts                          → last decision and attempt
//  5. relay     (relay.go)    a stream's events, translated and published
//     as each attempt reads them                    → the flight's bytes
//  6. settle    (settle.go)   the terminal, the stored answer and the
//     receipt committed together, then the last byte
//
// The owner of a whole (non-stream) answer runs stages 4 to 6 on the
// client's own goroutine and sends the answer once it is committed: the
// fast path (runInline). A stream, or a request another replica owns,
// runs them on a goroutine of its own that publishes to a flight the
// client's goroutine relays as every joiner does: the shared-flight path
// (runShared). Joiners and replays skip stages 4 to 6: they read a flight
// or the ledger.

// serveChat handles POST /v1/chat/completions and POST /v1/messages:
// stages 1 to 3. Each arrival either owns a new logical request — it
// runs the call and reads its output — or joins the one in flight for
// the same identity, reading the same output from its first byte
// (docs/identity.md, docs/streaming.md).
func (g *Gateway) serveChat(p provider.Protocol) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, lk, release, apiErr := g.enterTenant(r)
		if apiErr != nil {
			apiErr.Write(w, p, api.Meta{})
			return
		}
		defer release()
		a, apiErr := g.admit(w, r, p, t)
		if apiErr != nil {
			apiErr.Write(w, p, api.Meta{})
			return
		}
		c, apiErr := g.identify(r, a)
		if apiErr == nil {
			apiErr = c.admitKey(lk)
		}
		if apiErr != nil {
			apiErr.Write(w, p, api.Meta{})
			return
		}
		g.place(w, r, c)
	}
}

// serve runs stages 4 to 6 of a logical request this gateway owns: its
// attempts — whose streamed output stage 5 relays as they run — then its
// settlement, unless the request was answered on the way.
func (c *call) serve() {
	if d, last, ok := c.runAttempts(); ok {
		c.settle(d, last)
	}
}
