package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

// Leases is the part of the ledger the lease jobs use (ledger.Store has it).
type Leases interface {
	// Renew extends owner's leases of ids to until; it returns the ids it
	// could not renew (lost: another gateway may have settled them).
	Renew(ctx context.Context, owner string, ids []string, now, until time.Time) (lost []string, err error)
}

// Held is the requests whose leases a gateway holds: Each lists them,
// Lost tells the one whose lease the store would not renew.
type Held interface {
	Each(f func(id string))
	Lost(id string)
}

// Renewal keeps a gateway's claims alive while their calls run
// (docs/identity.md): every renew, each held lease is extended to lease
// from now. A lease the store would not renew — it lapsed, so recovery
// elsewhere may have settled the request — is lost for good: held.Lost
// is told, and its call dispatches nothing more.
func Renewal(store Leases, c clock.Clock, log *slog.Logger, owner string, lease, renew time.Duration, held Held) Job {
	return Job{Name: "lease renewal", Every: Fixed(renew), Run: func(ctx context.Context) {
		var ids []string
		held.Each(func(id string) { ids = append(ids, id) })
		if len(ids) == 0 {
			return
		}
		now := c.Now()
		lost, err := store.Renew(ctx, owner, ids, now, now.Add(lease))
		if err != nil {
			if ctx.Err() == nil {
				log.Error("renew leases", "err", err)
			}
			return
		}
		for _, id := range lost {
			held.Lost(id)
		}
	}}
}

// AbandonedRetry is how often the leases of abandoned requests are given
// up while the store does not answer.
const AbandonedRetry = 250 * time.Millisecond

// Abandoned is the requests whose calls a gateway abandoned when its
// store failed mid-request.
type Abandoned interface {
	Each(f func(id string))
	// Forget drops id once its lease is given up.
	Forget(id string)
}

// GiveUp ends the leases of the requests a gateway's calls abandoned
// (their store failed mid-request): they become lapsed, and the next
// arrival of their key on any gateway, or its sweep, settles them — 502
// outcome_unknown everywhere, at once, not one gateway's 409 until the
// lease would have lapsed. While the store does not answer it tries
// again every AbandonedRetry, and once more as the gateway stops.
func GiveUp(store Leases, c clock.Clock, owner string, abandoned Abandoned) Job {
	return Job{Name: "give up abandoned leases", Every: Fixed(AbandonedRetry), AtStop: true, Run: func(ctx context.Context) {
		var ids []string
		abandoned.Each(func(id string) { ids = append(ids, id) })
		if len(ids) == 0 {
			return
		}
		now := c.Now()
		if _, err := store.Renew(ctx, owner, ids, now, now.Add(-time.Millisecond)); err != nil {
			return // the store is still down: next time
		}
		for _, id := range ids {
			abandoned.Forget(id)
		}
	}}
}
