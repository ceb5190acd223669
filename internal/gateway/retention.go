package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
)

// retention is the background job that deletes what the ledger keeps
// past its retentions (docs/receipts.md, "Retention"; docs/identity.md):
// first the idempotency records that finished longer ago than
// idempotency.retention, with the stored answers replays send — with
// on_expired: reject 30 × longer, so that an expired key can still be
// recognised and refused — then the histories (receipts, attempt events)
// of requests created longer ago than ledger.receipt_retention whose
// records are gone. A history is kept at least as long as its record, so
// the sweep's horizon is the longer of the two. The job reads both from
// the configuration in force at each run, so a reload applies at the
// next one. It needs only the store, a clock and the configuration.
type retention struct {
	store  ledger.Store
	clock  clock.Clock
	log    *slog.Logger
	policy func() *policy.Policy
}

// retentionEvery bounds how long the job waits between runs (the
// shortest retention's half, when that is shorter) and at least how
// long.
const (
	retentionEvery    = time.Minute
	retentionEveryMin = time.Second
)

// startRetention runs the retention job until the gateway stops.
func (g *Gateway) startRetention() {
	j := &retention{store: g.ledger, clock: g.clock, log: g.log, policy: g.policy}
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		j.loop(g.stop)
	}()
}

// horizons are how long pol keeps finished records and histories (0:
// histories forever).
func horizons(pol *policy.Policy) (records, histories time.Duration) {
	records = pol.Idempotency.Retention.D()
	if pol.Idempotency.OnExpired == "reject" {
		records *= 30
	}
	if histories = pol.Config.Ledger.ReceiptRetention.D(); histories > 0 {
		histories = max(histories, records)
	}
	return records, histories
}

// every is how long the job waits between runs under pol: a minute, or
// half the shortest retention when that is shorter, never under a second.
func (j *retention) every() time.Duration {
	pol := j.policy()
	d := retentionEvery
	for _, r := range []time.Duration{pol.Idempotency.Retention.D(), pol.Config.Ledger.ReceiptRetention.D()} {
		if r > 0 {
			d = min(d, r/2)
		}
	}
	return max(d, retentionEveryMin)
}

// loop runs the job every j.every() until stop closes; a run in progress
// then stops between the sweep's batches.
func (j *retention) loop(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(j.every())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		j.run(ctx)
		t.Reset(j.every())
	}
}

// run expires the records past their retention, then sweeps the
// histories past theirs.
func (j *retention) run(ctx context.Context) {
	records, histories := horizons(j.policy())
	now := j.clock.Now()
	if n, err := j.store.Expire(ctx, now.Add(-records)); err != nil {
		if ctx.Err() == nil {
			j.log.Error("expire records", "err", err)
		}
	} else if n > 0 {
		j.log.Info("expired idempotency records", "count", n)
	}
	if histories <= 0 {
		return
	}
	n, err := j.store.Sweep(ctx, now.Add(-histories))
	if n > 0 {
		j.log.Info("swept receipts and attempt events past their retention", "requests", n, "created_before", now.Add(-histories))
	}
	if err != nil && ctx.Err() == nil {
		j.log.Error("sweep receipts and attempt events", "err", err)
	}
}
