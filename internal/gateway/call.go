package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/tracing"

	"go.opentelemetry.io/otel/trace"
)

// call is one logical request. It runs on its own goroutine, detached from
// any one client: its output goes to a flight that the owner and every
// joiner read, and it is cancelled only when all of them have left.
type call struct {
	g      *Gateway
	ctx    context.Context
	flight *coord.Flight
	// direct, on the fast path of a stream, sends what the call publishes
	// to its own client from the call's goroutine (runInline).
	direct        *directClient
	proto         provider.Protocol
	tenant        *policy.Tenant
	alias         *policy.Alias
	in            *provider.ClientRequest
	id            string
	identity      string
	requestSHA    string
	created       time.Time
	deadline      time.Time
	stream        bool
	streamEvents  bool
	anthropicBeta string
	clientRetries int
	rec           *receipt.Recorder
	log           *eventLog
	out           *output
	// followTo is the request another gateway runs for this identity,
	// which this call relays instead (set by claim); follows counts how
	// often the call went after one, so it never goes round forever.
	followTo *coord.Remote
	// joined is the request id of the logical request another gateway
	// runs that this arrival joined (follow): an answer about how that
	// request ended says "joined", as its output would have.
	joined  string
	follows int
	// live is the configuration the request started under: its provider
	// clients serve every attempt, whatever a reload changes meanwhile.
	live *live
	// access is the owner's log line, told how the request ended.
	access *accesslog.Entry
	// span is the logical request's trace span; spanCtx carries it.
	span    trace.Span
	spanCtx context.Context
	// dropped lists the request's fields a route of the other protocol
	// drops (may_drop, X-Oncegate-May-Drop; docs/translation.md).
	dropped []string
	// mayDrop lists the fields the alias and the request let a route drop.
	mayDrop []string
	// dropParams: drop_params is in force for the request — every
	// droppable field a route cannot carry may be dropped (dropParamsOf).
	dropParams bool
	// turn is the conversation turn this request is a try of (POST
	// /v1/responses); nil for chat.
	turn *turnCall
	// key is the request's use of its virtual key's limits
	// (docs/keys-and-teams.md); nil for none.
	key *keyring.Use
	// tenantRefused names the tenant's cost ceiling that refused the last
	// reservation ("day", "month", "total"; nil when none did).
	tenantRefused atomic.Pointer[string]
	// rateTaken: the tenant's rate was counted when the flight was
	// placed (a shared coordinator does it with the claim).
	rateTaken bool
	// finishing is set as the terminal is committed: a lease the store
	// reports lost from then on was lost to the terminal itself.
	finishing atomic.Bool
	// leaseLost is set when the store would not renew this call's lease:
	// it lapsed, and another gateway may have settled the request. The
	// call dispatches nothing more.
	leaseLost atomic.Bool
}

// loseLease marks the call's lease lost (see leaseLost).
func (c *call) loseLease() {
	if !c.leaseLost.Swap(true) && !c.finishing.Load() {
		c.g.log.Warn("lost the lease of a request in flight; it dispatches nothing more", "request_id", c.id)
	}
}

// errLeaseLost refuses a dispatch after the call's lease was lost.
var errLeaseLost = errors.New("the request's lease lapsed")

// attemptResult is what one attempt produced besides its observation.
type attemptResult struct {
	obs         receipt.Observation
	ordinal     int
	race        *raceSlot // nil: not hedged
	slot        int       // 0: the attempt, 1: its hedge
	prompt      int64     // prompt tokens sent
	finish      string    // a completed stream's finish reason
	kind        gw.Kind
	route       *policy.Route
	upstreamErr *provider.UpstreamError // a provider's error response
	detail      string                  // why, for logs and protocol violations
	body        []byte                  // non-streamed success: the client's body
	sent        bool                    // a transport failure after the request left
	purpose     string                  // why it was made: initial, retry, fallback …
}

func (c *call) meta() api.Meta {
	r := c.rec.R
	return api.Meta{RequestID: c.id, Attempts: len(r.Attempts), Terminal: gw.Terminal(r.Terminal), Reason: gw.Reason(r.Reason)}
}

// publishError ends the flight with an error response.
func (c *call) publishError(e *api.Error, m api.Meta) {
	head, body := e.Render(c.proto, m)
	c.flight.Finish(head, body)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// endSpan ends the request's trace span with its receipt.
func (c *call) endSpan() { tracing.EndRequest(c.span, c.rec.R) }
