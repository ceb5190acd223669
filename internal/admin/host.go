package admin

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
)

// Gateway is what the admin API needs of the running gateway: the
// configuration in force, who a request comes from, and the key cache
// to tell of a change. Each is asked at the moment it is needed, so a
// reload is seen by the next request.
type Gateway interface {
	// Policy is the policy in force.
	Policy() *policy.Policy
	// AdminEnabled reports whether an admin key is configured.
	AdminEnabled() bool
	// IsAdmin reports whether r carries the admin key.
	IsAdmin(r *http.Request) bool
	// IsTenant reports whether r carries a tenant's key or a live
	// virtual key (and notes the tenant in r's access line).
	IsTenant(r *http.Request) bool
	// KeyChanged drops virtual key id from the gateway's key cache and
	// tells the other replicas it changed (docs/keys-and-teams.md).
	KeyChanged(ctx context.Context, id string)
	// TenantChanged drops team id from the gateway's cache and tells
	// the other replicas it changed (docs/keys-and-teams.md, "Teams").
	TenantChanged(ctx context.Context, id string)
}

// Deps are what an API is made of.
type Deps struct {
	// Gateway is the running gateway.
	Gateway Gateway
	// Store holds the keys and the receipts the spend report sums.
	Store ledger.Store
	// Clock tells time.
	Clock clock.Clock
	// Log receives the audit lines.
	Log *slog.Logger
	// Metrics counts the admin actions.
	Metrics *metrics.Metrics
	// Secret is the HMAC secret virtual keys' digests are made with.
	Secret []byte
}

// API serves the admin API. It is safe for concurrent use.
type API struct {
	gw      Gateway
	store   ledger.Store
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics
	secret  []byte
}

// New makes the admin API of d.
func New(d Deps) *API {
	return &API{gw: d.Gateway, store: d.Store, clock: d.Clock, log: d.Log, metrics: d.Metrics, secret: d.Secret}
}
