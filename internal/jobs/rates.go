package jobs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// RateKeeper is tenant limits whose rate buckets live in this process and
// can be kept across a restart (quota.Limits; shared limits keep theirs
// in Redis).
type RateKeeper interface {
	Snapshot() []byte
	Restore(snapshot []byte)
}

// StateStore is the part of the ledger that keeps small named values.
type StateStore interface {
	SaveState(ctx context.Context, name string, value []byte) error
	State(ctx context.Context, name string) ([]byte, error)
}

// RatesState names the rate buckets in the store.
const RatesState = "tenant_rates"

// RestoreRates continues the tenants' rate buckets from the store, so a
// restart hands no tenant a fresh minute of requests.
func RestoreRates(ctx context.Context, store StateStore, rk RateKeeper, log *slog.Logger) {
	if b, err := store.State(ctx, RatesState); err == nil {
		rk.Restore(b)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		log.Warn("read the tenants' rates from the store", "err", err)
	}
}

// SaveRates keeps the tenants' rate buckets in the store every second
// they changed, and once more as the gateway stops: a crash loses at most
// a second of them.
func SaveRates(store StateStore, rk RateKeeper, log *slog.Logger) Job {
	var last []byte
	return Job{Name: "keep tenant rates", Every: Fixed(time.Second), AtStop: true, Run: func(ctx context.Context) {
		snap := rk.Snapshot()
		if snap == nil || bytes.Equal(snap, last) {
			return
		}
		if err := store.SaveState(context.Background(), RatesState, snap); err != nil {
			log.Warn("keep the tenants' rates in the store", "err", err)
			return
		}
		last = snap
	}}
}
