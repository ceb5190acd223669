// Package conversation is the Responses API: the gateway holds each
// conversation in its turn ledger and sends the whole of it to whichever
// route serves a turn (docs/conversations.md). It owns the routes
//
//	POST   /v1/responses                     a turn (ServeResponses)
//	GET    /v1/responses/{id}                a response (ServeResponse)
//	DELETE /v1/responses/{id}                (DeleteResponse)
//	GET    /v1/responses/{id}/input_items    a turn's input (ServeInputItems)
//
// and what they need of turns: the turn ledger's reads and writes, a
// retried turn found and continued or replayed, the answer in the form
// asked for, and turns on stateful routes (provider type openai-responses)
// reconciled with the conversation the provider holds. Each try of a turn
// is a logical request of the request path, which this package reaches
// only through RequestPath; the request path calls back into a try
// through Try's methods.
package conversation

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/quota"
)

// RequestPath is what the Responses API uses of the request path
// (docs/architecture.md): a request's admission, the logical request a
// try of a turn runs as, and a stateful route's stored state.
type RequestPath interface {
	// Policy is the configuration in force.
	Policy() *policy.Policy
	// Enter finds the request's tenant (or virtual key) by its API key
	// and counts the request against their limits until release is
	// called — before the body is read.
	Enter(r *http.Request) (t *policy.Tenant, release func(), _ *api.Error)
	// ReadRequest reads the request's Idempotency-Key (validated when
	// sent, "" when not) and its body, within the body limit.
	ReadRequest(w http.ResponseWriter, r *http.Request) (key string, body []byte, _ *api.Error)
	// NoteModel names the model asked for on the request's access line.
	NoteModel(r *http.Request, model string)
	// GateKey checks the request's virtual key, if it came with one, for
	// model alias: its model allow-list and request rate.
	GateKey(r *http.Request, alias string) *api.Error
	// KeyID is the id of the virtual key the request came with, "" for
	// none.
	KeyID(r *http.Request) string
	// Joins says whether a keyless request of alias may share another's
	// generation (X-Oncegate-Join over the key's, the alias's and the
	// configuration's keyless_join).
	Joins(r *http.Request, alias *policy.Alias) (bool, *api.Error)
	// ClientRetries is how many times an official SDK retried the
	// request on its own (x-stainless-retry-count).
	ClientRetries(h http.Header) int
	// Identify makes try's current try of its turn the logical request
	// cr (stage 2: the try's identity, deadline and receipt header). The
	// returned place runs it, or joins it in flight (stages 3 to 6),
	// answering on its writer.
	Identify(r *http.Request, t *policy.Tenant, alias *policy.Alias, cr *provider.ClientRequest, try *Try) (place func(http.ResponseWriter), _ *api.Error)
	// SettleRecord settles a request whose owner's lease lapsed.
	SettleRecord(ctx context.Context, rec *ledger.Record)
	// StateCall reads or edits a stateful route's stored state: a call
	// that generates nothing, outside the attempts. body, if not nil, is
	// sent as JSON; the answer's body and status come back.
	StateCall(ctx context.Context, route *policy.Route, method, path string, body any) ([]byte, int, error)
}

// Spend learns what was spent outside a logical request: orphaned copies
// of a turn the provider billed (docs/conversations.md).
type Spend interface {
	// Settle charges cost to the reservation's tenant and day.
	Settle(r quota.Reservation, cost gw.NanoUSD)
}

// Config is what a Service is built from.
type Config struct {
	// Path is the request path each try runs on.
	Path RequestPath
	// Ledger holds the turns and their tries' records.
	Ledger ledger.Store
	// Clock, Log, Metrics: the gateway's.
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Secret keys the turns' fingerprints (docs/identity.md).
	Secret []byte
	// Spend is told of orphans' cost.
	Spend Spend
	// Failpoint, if set, is called at named points crash tests stop the
	// process at (docs/chaos.md).
	Failpoint func(name string)
}

// Service serves the Responses API. It is safe for concurrent use.
type Service struct {
	path      RequestPath
	ledger    ledger.Store
	clock     clock.Clock
	log       *slog.Logger
	metrics   *metrics.Metrics
	secret    []byte
	spend     Spend
	failpoint func(string)
}

// New builds the Responses API over a request path.
func New(c Config) *Service {
	s := &Service{path: c.Path, ledger: c.Ledger, clock: c.Clock, log: c.Log, metrics: c.Metrics,
		secret: c.Secret, spend: c.Spend, failpoint: c.Failpoint}
	if s.failpoint == nil {
		s.failpoint = func(string) {}
	}
	return s
}
