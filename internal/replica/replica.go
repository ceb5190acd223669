// Package replica wires a gateway for running beside others (docs/replicas.md):
// the Redis coordination, and the breakers, fleet retry budget and tenant
// limits every replica shares, put into the gateway's options. The
// binary's serve and the load benchmark both use it.
package replica

import (
	"context"
	"log/slog"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// Share connects to the coordination at url and makes opts use it:
// in-flight claims and joins across gateways (opts.Flights), its health
// (opts.Coordination), shared breakers, retry budget, tenant limits and routes' load,
// the tenants' day seeded from store when Redis lacks it. opts.Owner
// must be set: it is how other replicas reach this one. The caller
// closes the coordinator after the gateway.
func Share(ctx context.Context, pol *policy.Policy, url string, store ledger.Store, log *slog.Logger, opts *gateway.Options) (*redis.Coordinator, error) {
	co, err := redis.New(ctx, redis.Config{URL: url, Owner: opts.Owner, LeaseTTL: pol.Config.Lease.TTL.D(), Renew: pol.Config.Lease.Renew.D(),
		JoinBuffer: int(pol.Limits.MaxStreamBufferBytes), Logger: log, Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	opts.Flights, opts.Coordination = co, co
	opts.Breakers = co.NewBreakers(pol.BreakerConfig(), pol.RouteIDs())
	opts.RetryBudget = co.NewBudget(pol.BudgetConfig())
	opts.Tenants = co.NewTenants(pol.TenantLimits(), seedSpend(store))
	// The tenants' month and lifetime, seeded from the store's spend
	// (with what requests in flight reserved) when Redis lacks them.
	opts.TenantSpans = quota.Spans{
		Month: co.NewPeriodic("tenantmonth:", quota.Month, nil, ledger.TenantSpendSeed(store, ledger.SpanMonth)),
		Total: co.NewPeriodic("tenanttotal:", quota.Lifetime, nil, ledger.TenantSpendSeed(store, ledger.SpanTotal)),
	}
	opts.AlertsOnce = co // one replica sends each budget alert
	// Virtual keys' limits and the feed of their changes (docs/keys-and-teams.md).
	opts.KeyLimits = keyring.Limits{
		Day:    co.NewPeriodic("key:", gw.Day, nil, ledger.KeySpendSeed(store, ledger.SpanDay)),
		Month:  co.NewPeriodic("keymonth:", quota.Month, nil, ledger.KeySpendSeed(store, ledger.SpanMonth)),
		Total:  co.NewPeriodic("keytotal:", quota.Lifetime, nil, ledger.KeySpendSeed(store, ledger.SpanTotal)),
		Tokens: co.NewPeriodic("keytpm:", quota.Minute, nil, noSpend),
		// max_concurrent: leases of the lease's TTL, across replicas.
		Running: co.NewRunning("keyrun:"),
	}
	opts.KeyFeed = co.NewKeyFeed()
	clk := opts.Clock
	if clk == nil {
		clk = clock.System{}
	}
	opts.Load = load.New(clk, pol.LoadLimits())
	co.NewLoads(opts.Load)
	return co, nil
}

var _ keyring.Running = (*redis.Running)(nil)

// noSpend starts a period at nothing charged (tokens per minute are not
// kept in the store).
func noSpend(context.Context, int64) (map[string]int64, error) { return map[string]int64{}, nil }

// seedSpend is what Redis's day starts from when Redis lacks it (a new
// deployment, or Redis restarted empty): ledger.DaySpend, which counts
// what requests in flight reserved in the Redis that was lost.
func seedSpend(store ledger.Store) func(ctx context.Context, day int64) (map[string]int64, error) {
	return func(ctx context.Context, day int64) (map[string]int64, error) {
		return ledger.DaySpend(ctx, store, day)
	}
}
