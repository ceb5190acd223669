package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	return SpanSpend(ctx, store, SpanDay, day)
}

// Span is the period a cost ceiling holds for (docs/overload.md): a UTC
// day, a UTC month, or the whole lifetime of a tenant or key.
type Span int

// The spans a budget has: cost_usd_per_day, cost_usd_per_month,
// cost_usd_total.
const (
	SpanDay Span = iota
	SpanMonth
	SpanTotal
)

// FirstDay is the UTC day a lifetime's spend is summed from: the Unix
// epoch's.
const FirstDay int64 = 0

// String is the span's name in metrics and alerts: day, month, total.
func (s Span) String() string {
	switch s {
	case SpanMonth:
		return "month"
	case SpanTotal:
		return "total"
	}
	return "day"
}

// Days are the UTC days [from, to] of period p of the span: p numbers
// days since the epoch (Day) for SpanDay, months since January 1970 for
// SpanMonth, and nothing for SpanTotal (every day).
func (s Span) Days(p int64) (from, to int64) {
	switch s {
	case SpanMonth:
		first := time.Date(1970+int(p/12), time.Month(p%12+1), 1, 0, 0, 0, 0, time.UTC)
		return Day(first), Day(first.AddDate(0, 1, -1))
	case SpanTotal:
		return FirstDay, math.MaxInt32
	}
	return p, p
}

// SpanSpend is DaySpend for the period p of any span: each tenant's
// charges over its days, plus what requests still in progress reserved
// in them.
func SpanSpend(ctx context.Context, store Store, span Span, p int64) (map[string]int64, error) {
	from, to := span.Days(p)
	unfinished, err := store.Unfinished(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the requests in progress: %w", err)
	}
	var spend map[string]int64
	if span == SpanDay {
		spend, err = store.Spend(ctx, p)
	} else {
		spend, err = store.TenantSpend(ctx, from, to)
	}
	if err != nil {
		return nil, err
	}
	for _, u := range unfinished {
		for _, ev := range u.Events {
			var d Dispatch
			if day := Day(ev.At); ev.Type != EvReserved || day < from || day > to || json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			spend[u.Record.Tenant] += int64(gw.NanoFromUSD(d.ReserveUSD))
		}
	}
	return spend, nil
}

// TenantSpendSeed reads what each tenant spent in a period of span from
// the store (SpanSpend): where Redis starts a tenant's month or lifetime
// it lacks.
func TenantSpendSeed(store Store, span Span) func(ctx context.Context, period int64) (map[string]int64, error) {
	return func(ctx context.Context, p int64) (map[string]int64, error) {
		return SpanSpend(ctx, store, span, p)
	}
}

// KeySpendSeed reads what each virtual key was charged in a period of
// span (a UTC day, month, or its lifetime; see Span.Days) from the
// store: where Redis starts a key's day, month or lifetime it lacks.
// Tokens per minute start afresh.
func KeySpendSeed(store Store, span Span) func(ctx context.Context, period int64) (map[string]int64, error) {
	return func(ctx context.Context, p int64) (map[string]int64, error) {
		from, to := span.Days(p)
		return store.KeySpend(ctx, from, to)
	}
}
