package quota

import (
	"math"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
)

// Lifetime numbers every time as the same period, so that a ceiling kept
// under it never starts afresh: cost_usd_total (docs/overload.md).
func Lifetime(time.Time) int64 { return 0 }

// Spans are the cost ceilings of one scope — the tenants, or the virtual
// keys — beyond the day: per UTC month and over the whole lifetime, each
// keyed by the tenant's (or key's) id. Each is reserved and settled like
// the day's (Ceiling). Nil fields are made in process by Fill.
type Spans struct {
	// Month holds cost_usd_per_month (its ceiling is per UTC month).
	Month Ceiling
	// Total holds cost_usd_total (its ceiling never resets).
	Total Ceiling
}

// Fill makes the nil ceilings in process, on clk.
func (s *Spans) Fill(clk clock.Clock) {
	if s.Month == nil {
		s.Month = NewPeriodic(clk, Month, nil)
	}
	if s.Total == nil {
		s.Total = NewPeriodic(clk, Lifetime, nil)
	}
}

// Costs are one tenant's (or key's) cost ceilings per span, in nano-USD;
// 0 means none. A store tenant's budget and a file tenant's both come to
// this, so both are held alike.
type Costs struct {
	Month, Total gw.NanoUSD
}

// SetCosts replaces every id's month and lifetime ceilings (ids left out
// have none), keeping what each was charged.
func (s Spans) SetCosts(costs map[string]Costs) {
	month := make(map[string]Tenant, len(costs))
	total := make(map[string]Tenant, len(costs))
	for id, c := range costs {
		month[id], total[id] = Tenant{CostPerDay: c.Month}, Tenant{CostPerDay: c.Total}
	}
	type setter interface{ SetLimits(map[string]Tenant) }
	if ls, ok := s.Month.(setter); ok {
		ls.SetLimits(month)
	}
	if ls, ok := s.Total.(setter); ok {
		ls.SetLimits(total)
	}
}

// SpanReservations are an attempt's reservations under an id's month and
// lifetime ceilings.
type SpanReservations struct {
	month, total Reservation
	held         bool
}

// Reserve sets an attempt's worst case aside under id's month and
// lifetime ceilings, until the attempt ends at the latest. When one does
// not fit, nothing is held and refused names it ("month" or "total").
func (s Spans) Reserve(id string, amount gw.NanoUSD, until time.Time) (r SpanReservations, refused string) {
	month, ok := s.Month.Reserve(id, amount, until)
	if !ok {
		return SpanReservations{}, "month"
	}
	total, ok := s.Total.Reserve(id, amount, until)
	if !ok {
		s.Month.Settle(month, 0)
		return SpanReservations{}, "total"
	}
	return SpanReservations{month: month, total: total, held: true}, ""
}

// Settle releases the reservations and charges the attempt's real cost.
func (s Spans) Settle(r SpanReservations, cost gw.NanoUSD) {
	if !r.held {
		return
	}
	s.Month.Settle(r.month, cost)
	s.Total.Settle(r.total, cost)
}

// Allowance is the least id may still reserve under its month and
// lifetime ceilings; capped is false when it has neither.
func (s Spans) Allowance(id string) (allowance gw.NanoUSD, capped bool) {
	allowance = math.MaxInt64
	for _, c := range []Ceiling{s.Month, s.Total} {
		if a, ok := c.Allowance(id); ok {
			allowance, capped = min(allowance, a), true
		}
	}
	if !capped {
		return 0, false
	}
	return allowance, true
}

// Until is how long, in whole seconds (at least 1), until the period of
// span ("day", "month") that holds now ends; 0 for "total", which never
// ends.
func Until(now time.Time, span string) int {
	var end time.Time
	switch span {
	case "total":
		return 0
	case "month":
		end = PeriodEnd(now, Month)
	default:
		end = PeriodEnd(now, gw.Day)
	}
	return int(math.Ceil(max(1, end.Sub(now).Seconds())))
}
