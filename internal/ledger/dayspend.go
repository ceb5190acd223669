package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// DaySpend is what each tenant's day starts from when it is read from
// the store (at a gateway's start, or by Redis that lost the day): the
// day's charges, plus the worst case reserved by every attempt of a
// request still in progress. Those reservations were held by a process,
// or a Redis, that is gone; leaving them out would hand the budget they
// hold out a second time. They are charged again when their requests
// settle, so the day errs by them towards refusing until it is next read
// (docs/overload.md).
//
// The requests in progress are read before the charges. A request's
// terminal moves it from one to the other in one commit, so a request
// that finishes between the two reads is counted twice (towards refusing)
// — read the other way round, it would be missed by both.
func DaySpend(ctx context.Context, store Store, day int64) (map[string]int64, error) {
	unfinished, err := store.Unfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the requests in progress: %w", err)
	}
	spend, err := store.Spend(ctx, day)
	if err != nil {
		return nil, err
	}
	for _, u := range unfinished {
		for _, ev := range u.Events {
			var d Dispatch
			if ev.Type != EvReserved || gw.Day(ev.At) != day || json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			spend[u.Record.Tenant] += int64(gw.NanoFromUSD(d.ReserveUSD))
		}
	}
	return spend, nil
}

// KeySpendSeed reads what each virtual key was charged in a UTC day
// (gw.Day), or with month in a UTC month (quota.Month), from the store:
// where Redis starts a key's day or month it lacks. Tokens per minute
// start afresh.
func KeySpendSeed(store Store, month bool) func(ctx context.Context, period int64) (map[string]int64, error) {
	return func(ctx context.Context, p int64) (map[string]int64, error) {
		if !month {
			return store.KeySpend(ctx, p, p)
		}
		first := time.Date(1970+int(p/12), time.Month(p%12+1), 1, 0, 0, 0, 0, time.UTC)
		return store.KeySpend(ctx, gw.Day(first), gw.Day(first.AddDate(0, 1, -1)))
	}
}
