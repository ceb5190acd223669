// Package quota enforces per-tenant limits (docs/overload.md): a request rate
// and a daily cost ceiling. The ceiling is kept by reservation: an attempt
// reserves its worst-case cost before it is dispatched and settles at its
// real cost once observed, and a reservation that does not fit under the
// ceiling is refused — so concurrent requests can never together spend
// past it by more than what one attempt's real cost exceeded its estimate.
// Limits is safe for concurrent use and holds one process's state.
package quota

import (
	"encoding/json"
	"math"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
)

// Tenant is one tenant's limits; zero values mean no limit.
type Tenant struct {
	RequestsPerMinute int
	CostPerDay        gw.NanoUSD
}

// Limits holds every tenant's rate and spend.
type Limits struct {
	clock   clock.Clock
	period  func(time.Time) int64
	mu      sync.Mutex
	tenants map[string]*state
}

type state struct {
	lim Tenant
	// The rate is a token bucket holding up to a minute's worth of
	// requests, refilled continuously.
	tokens float64
	filled time.Time
	// Spend is per UTC day (days since the Unix epoch).
	day      int64
	charged  gw.NanoUSD
	reserved gw.NanoUSD
}

// New returns the limits of the given tenants.
func New(clk clock.Clock, tenants map[string]Tenant) *Limits {
	return NewPeriodic(clk, gw.Day, tenants)
}

// NewPeriodic returns limits whose ceiling (Tenant.CostPerDay) holds per
// period instead of per UTC day: period numbers the period a time falls
// in (gw.Day, Month, Minute). Virtual keys keep their monthly cost and
// their tokens per minute this way (docs/keys-and-teams.md); the amounts reserved
// may be tokens rather than nano-USD.
func NewPeriodic(clk clock.Clock, period func(time.Time) int64, tenants map[string]Tenant) *Limits {
	l := &Limits{clock: clk, period: period, tenants: make(map[string]*state, len(tenants))}
	now := clk.Now()
	for id, t := range tenants {
		l.tenants[id] = &state{lim: t, tokens: float64(t.RequestsPerMinute), filled: now, day: period(now)}
	}
	return l
}

// Month numbers the UTC month of t: months since January 1970.
func Month(t time.Time) int64 {
	t = t.UTC()
	return int64(t.Year()-1970)*12 + int64(t.Month()) - 1
}

// Minute numbers the minute of t since the Unix epoch.
func Minute(t time.Time) int64 { return t.Unix() / 60 }

// PeriodEnd is when the period p of a period function ends: the start of
// the next UTC day, month or minute.
func PeriodEnd(t time.Time, period func(time.Time) int64) time.Time {
	t = t.UTC()
	p := period(t)
	switch {
	case p == Minute(t):
		return t.Truncate(time.Minute).Add(time.Minute)
	case p == Month(t):
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	y, m, d := t.Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// SetLimits replaces the tenants' limits (a reload): a tenant keeps its
// state (tokens, today's spend and reservations) under its new limits; a
// new one starts full.
func (l *Limits) SetLimits(tenants map[string]Tenant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	for id, t := range tenants {
		if s, ok := l.tenants[id]; ok {
			s.lim = t
			s.tokens = min(s.tokens, float64(t.RequestsPerMinute))
			continue
		}
		l.tenants[id] = &state{lim: t, tokens: float64(t.RequestsPerMinute), filled: now, day: l.period(now)}
	}
}

// get returns the tenant's state with its day rolled over; nil for a
// tenant without limits. l.mu is held.
func (l *Limits) get(tenant string, now time.Time) *state {
	s := l.tenants[tenant]
	if s != nil && s.day != l.period(now) {
		s.day, s.charged = l.period(now), 0 // reservations in flight carry over
	}
	return s
}

// Reservation is one attempt's worst case, set aside under a tenant's
// ceiling until it settles. ID names it where reservations are kept apart
// (shared coordination); Day is the UTC day it was made on.
type Reservation struct {
	Tenant string
	Amount gw.NanoUSD
	ID     string
	Day    int64
}

// Seed sets what each tenant was charged on day, from the store, so that
// a restart does not hand a tenant a fresh budget (docs/overload.md). A
// tenant's spend is only ever raised by it.
func (l *Limits) Seed(day int64, charged map[string]gw.NanoUSD) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, v := range charged {
		s := l.get(id, l.clock.Now())
		if s != nil && s.day == day && v > s.charged {
			s.charged = v
		}
	}
}

// Take counts one request against the tenant's rate. When the rate is
// spent it returns false and how long until a request would be admitted.
// It never fails (the error is for limits kept elsewhere).
func (l *Limits) Take(tenant string) (ok bool, retryAfter time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	s := l.get(tenant, now)
	if s == nil || s.lim.RequestsPerMinute <= 0 {
		return true, 0, nil
	}
	rate := float64(s.lim.RequestsPerMinute) / 60 // per second
	if el := now.Sub(s.filled).Seconds(); el > 0 {
		s.tokens = math.Min(float64(s.lim.RequestsPerMinute), s.tokens+el*rate)
	}
	s.filled = now
	if s.tokens >= 1 {
		s.tokens--
		return true, 0, nil
	}
	return false, time.Duration((1 - s.tokens) / rate * float64(time.Second)), nil
}

// Capped reports whether the tenant has a daily cost ceiling.
func (l *Limits) Capped(tenant string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.tenants[tenant]
	return s != nil && s.lim.CostPerDay > 0
}

// Allowance is what the tenant may still reserve today: the ceiling less
// what is charged and reserved (never negative). ok is false when the
// tenant has no ceiling.
func (l *Limits) Allowance(tenant string) (allowance gw.NanoUSD, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(tenant, l.clock.Now())
	if s == nil || s.lim.CostPerDay <= 0 {
		return 0, false
	}
	return max(0, s.lim.CostPerDay-s.charged-s.reserved), true
}

// Reserve sets amount aside for an attempt about to be dispatched; false
// means it does not fit under today's ceiling and nothing was reserved.
// (until, when the attempt ends at the latest, matters to limits kept
// elsewhere; here a reservation lives until it is settled.)
func (l *Limits) Reserve(tenant string, amount gw.NanoUSD, _ time.Time) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	r := Reservation{Tenant: tenant, Amount: amount, Day: l.period(now)}
	s := l.get(tenant, now)
	if s == nil || s.lim.CostPerDay <= 0 {
		return r, true
	}
	if s.charged+s.reserved+amount > s.lim.CostPerDay {
		return Reservation{}, false
	}
	s.reserved += amount
	return r, true
}

// Settle releases an attempt's reservation and charges what it cost.
func (l *Limits) Settle(r Reservation, cost gw.NanoUSD) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(r.Tenant, l.clock.Now())
	if s == nil || s.lim.CostPerDay <= 0 {
		return
	}
	s.reserved = max(0, s.reserved-r.Amount)
	s.charged += cost
}

// Charged is what the tenant was charged today.
func (l *Limits) Charged(tenant string) gw.NanoUSD {
	charged, _ := l.Spent(tenant)
	return charged
}

// Spent is what the tenant was charged today and has reserved now.
func (l *Limits) Spent(tenant string) (charged, reserved gw.NanoUSD) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(tenant, l.clock.Now())
	if s == nil {
		return 0, 0
	}
	return s.charged, s.reserved
}

// bucket is a tenant's rate bucket as Snapshot writes it.
type bucket struct {
	Tokens float64 `json:"tokens"`
	At     int64   `json:"at"` // Unix ns of the last refill
}

// Snapshot is the tenants' rate buckets, for a restart to continue from
// (nil when no tenant has a rate).
func (l *Limits) Snapshot() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bucket{}
	for id, s := range l.tenants {
		if s.lim.RequestsPerMinute > 0 {
			out[id] = bucket{Tokens: s.tokens, At: s.filled.UnixNano()}
		}
	}
	if len(out) == 0 {
		return nil
	}
	b, _ := json.Marshal(out) // floats and ints: cannot fail
	return b
}

// Restore continues the rate buckets of a Snapshot: a restart hands no
// tenant a fresh minute of requests. Buckets refill from when they were
// saved; a malformed or foreign snapshot changes nothing.
func (l *Limits) Restore(snapshot []byte) {
	var in map[string]bucket
	if json.Unmarshal(snapshot, &in) != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	for id, b := range in {
		s := l.tenants[id]
		at := time.Unix(0, b.At)
		if s == nil || s.lim.RequestsPerMinute <= 0 || at.After(now) || b.Tokens < 0 || math.IsNaN(b.Tokens) {
			continue
		}
		s.tokens, s.filled = math.Min(b.Tokens, float64(s.lim.RequestsPerMinute)), at
	}
}

// Ceiling is a request rate and a cost ceiling per tenant — or per
// virtual key, whose id is then the "tenant" (docs/overload.md,
// docs/keys-and-teams.md). *Limits implements it in one process; the Redis
// coordination across replicas.
type Ceiling interface {
	// Take counts one logical request against the tenant's rate; when it
	// is spent, ok is false and retryAfter says when to come back. An
	// error says the limit could not be consulted (coordination down).
	Take(tenant string) (ok bool, retryAfter time.Duration, err error)
	// Allowance is what the tenant may still reserve today; ok is false
	// for a tenant without a ceiling.
	Allowance(tenant string) (allowance gw.NanoUSD, ok bool)
	// Reserve sets an attempt's worst-case cost aside before dispatch,
	// until the attempt ends at the latest; false means it does not fit
	// under the ceiling (or the ceiling could not be consulted).
	Reserve(tenant string, amount gw.NanoUSD, until time.Time) (Reservation, bool)
	// Settle releases a reservation and charges the attempt's real cost.
	Settle(r Reservation, cost gw.NanoUSD)
	// Charged is what the tenant was charged today, reservations aside,
	// as far as can be told now (never more than the truth).
	Charged(tenant string) gw.NanoUSD
}

var _ Ceiling = (*Limits)(nil)
