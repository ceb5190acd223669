// Package readapi is oncegate's read APIs: what a key may read of what the
// gateway recorded and offers. It owns the routes /v1/receipts and
// /v1/receipts/{id} (docs/receipts.md), /v1/models and /v1/models/{id}
// (docs/api.md), and the web console — its pages under /ui/ and the JSON
// they read under /v1/console/, the live panel included
// (docs/operations.md, "Console"). A tenant's key reads its own, a virtual
// key only what its own requests made (docs/keys-and-teams.md), the admin key every
// tenant's.
//
// It knows the running gateway only through Gateway and the parts of
// Deps, and the ledger through ledger.Store: it does not import
// internal/gateway.
package readapi

import (
	"context"
	"net/http"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Gateway is what the read APIs need of the running gateway: the
// configuration in force, who a request comes from, and its receipts.
// Each is asked at the moment it is needed, so a reload is seen by the
// next request.
type Gateway interface {
	// Policy is the policy in force.
	Policy() *policy.Policy
	// IsAdmin reports whether r carries the admin key.
	IsAdmin(r *http.Request) bool
	// Caller authenticates r: the tenant whose key or live virtual key it
	// carries (nil: none it knows), and that virtual key's id ("" for a
	// tenant's own key). It notes the tenant in r's access line.
	Caller(r *http.Request) (tenant *policy.Tenant, keyID string)
	// MayUse reports whether the virtual key r carries, if any, may use
	// model alias: its models and its team's (a tenant's own key and the
	// admin key may use any the boundary lets through).
	MayUse(r *http.Request, alias string) bool
	// Receipt loads one of tenant's receipts: ledger.ErrNotFound when it
	// has none by that id. A request recovery settled before its receipt
	// was written has it rebuilt (docs/receipts.md).
	Receipt(ctx context.Context, tenant, id string) (*receipt.Receipt, error)
}

// Headroom is a retry budget that tells its headroom in this process: the
// retries taken and allowed now (docs/overload.md).
type Headroom interface {
	Headroom() (taken, allowed float64)
}

// Deps are what an API is made of.
type Deps struct {
	// Gateway is the running gateway.
	Gateway Gateway
	// Store holds the receipts.
	Store ledger.Store
	// Metrics, Load, Breakers and Budget are what the live panel shows:
	// the figures since the process started, the routes' load, their
	// breakers (nil: not shown) and the fleet retry budget's headroom
	// (nil: kept elsewhere, not shown).
	Metrics  *metrics.Metrics
	Load     *load.Table
	Breakers breaker.StateLister
	Budget   Headroom
}

// API serves the read APIs. It is safe for concurrent use.
type API struct {
	gw       Gateway
	store    ledger.Store
	metrics  *metrics.Metrics
	load     *load.Table
	breakers breaker.StateLister
	budget   Headroom
}

// New makes the read APIs of d.
func New(d Deps) *API {
	return &API{gw: d.Gateway, store: d.Store, metrics: d.Metrics, load: d.Load, breakers: d.Breakers, budget: d.Budget}
}

// Mount adds the read APIs' routes to m: receipts, models and the console,
// each JSON path with its 405 for the other methods.
func (a *API) Mount(m *http.ServeMux) {
	m.HandleFunc("GET /v1/models", a.modelsAuth(a.serveModels))
	m.HandleFunc("GET /v1/models/{id}", a.modelsAuth(a.serveModel))
	m.HandleFunc("GET /v1/receipts/{id}", a.readAuth("missing or unknown API key", a.serveReceipt))
	m.HandleFunc("GET /v1/receipts", a.readAuth("missing or unknown API key", a.serveReceipts))
	a.consoleRoutes(m)
	for path, allow := range map[string]string{"/v1/models": "GET", "/v1/models/{id}": "GET", "/v1/receipts/{id}": "GET", "/v1/receipts": "GET"} {
		m.HandleFunc(path, api.MethodNotAllowed(allow))
	}
}
