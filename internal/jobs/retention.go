package jobs

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

// RetentionEvery bounds how long the retention job waits between runs (the
// shortest retention's half, when that is shorter) and at least how
// long.
const (
	RetentionEvery    = time.Minute
	retentionEveryMin = time.Second
)

// Retention is the retention job: it expires records and sweeps
// histories past their retentions under the configuration policy returns
// at each run.
func Retention(store ledger.Store, c clock.Clock, log *slog.Logger, policy func() *policy.Policy) Job {
	j := &retention{store: store, clock: c, log: log, policy: policy}
	return Job{Name: "retention", Every: j.every, Run: j.run}
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
	d := RetentionEvery
	for _, r := range []time.Duration{pol.Idempotency.Retention.D(), pol.Config.Ledger.ReceiptRetention.D()} {
		if r > 0 {
			d = min(d, r/2)
		}
	}
	return max(d, retentionEveryMin)
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
