package keyring

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/quota"
)

// A virtual key narrows its tenant's limits (docs/keys-and-teams.md): its
// own tokens, cost and rate — and a team's tokens per minute, held here
// as a key's are, since every request of a team comes with one of its
// keys. Each attempt's worst case is reserved under the key's minute,
// day, month and lifetime before it is dispatched, as under the
// tenant's, and settled at its real cost and tokens. The tenant's limits
// hold over all its keys (internal/budget).

// limit names one of a key's reserved limits.
type limit int32

const (
	keyTokens limit = iota + 1 // tokens_per_minute
	keyDay                     // cost_usd_per_day
	keyMonth                   // cost_usd_per_month
	keyTotal                   // cost_usd_total
	// teamTokens is the key's team's tokens_per_minute, kept apart
	// from the key's own limits.
	teamTokens
)

// Use is one logical request's use of its virtual key's limits. A nil
// Use (a request without a virtual key) has none: it refuses nothing and
// reserves nothing.
type Use struct {
	ring *Ring
	key  *Key
	// deadline is the alias's deadline: about how long requests in
	// flight take to settle what they hold.
	deadline time.Duration
	// refused is the limit that refused the last reservation (0: none).
	refused atomic.Int32
}

// Use returns a logical request's use of lk's limits, for an alias whose
// retry deadline is deadline.
func (s *Ring) Use(lk *Key, deadline time.Duration) *Use {
	return &Use{ring: s, key: lk, deadline: deadline}
}

// Key is the virtual key.
func (u *Use) Key() *Key { return u.key }

// ForgetRefusal clears which limit refused the last reservation, before
// another is tried.
func (u *Use) ForgetRefusal() {
	if u != nil {
		u.refused.Store(0)
	}
}

// Refusal is the refusal of an attempt whose worst case — cost, and
// tokens — does not fit what the key (or its team) may still reserve;
// nil if it fits.
func (u *Use) Refusal(cost, tokens gw.NanoUSD) *api.Error {
	if u == nil {
		return nil
	}
	l, id := u.ring.Limits, u.key.Stored.ID
	team, _ := u.ring.TeamTokens(u.key)
	for _, c := range []struct {
		lim   quota.Ceiling
		id    string
		need  gw.NanoUSD
		which limit
	}{
		{l.Tokens, id, tokens, keyTokens},
		{l.Tokens, team, tokens, teamTokens},
		{l.Day, id, cost, keyDay},
		{l.Month, id, cost, keyMonth},
		{l.Total, id, cost, keyTotal},
	} {
		if a, capped := c.lim.Allowance(c.id); capped && c.need > a {
			return u.limitError(c.which, cost, tokens)
		}
	}
	return nil
}

// limitError is the refusal of an attempt (its worst case cost and
// tokens) by one of the key's limits. A cost limit whose charges still
// leave room for the attempt refuses only because reservations of
// requests in flight hold the rest, and they settle for less than they
// hold: key_budget_exceeded still, but come back in about the time they
// take (x-should-retry: true), not at the end of the day or month.
func (u *Use) limitError(which limit, cost, tokens gw.NanoUSD) *api.Error {
	k, l, now := u.key.Stored, u.ring.Limits, u.ring.clock.Now()
	until := func(period func(time.Time) int64) int {
		return int(math.Ceil(max(1, quota.PeriodEnd(now, period).Sub(now).Seconds())))
	}
	switch which {
	case teamTokens:
		_, perMinute := u.ring.TeamTokens(u.key)
		u.ring.metrics.ObserveTenantRejection(k.Tenant, api.CodeTenantRateLimited)
		e := api.Errorf(api.CodeTenantRateLimited, "team %s is over its %d tokens per minute (this request may use %d)", k.Tenant, perMinute, tokens)
		e.RetryAfter = until(quota.Minute)
		return e
	case keyTokens:
		u.ring.metrics.ObserveTenantRejection(k.Tenant, api.CodeKeyRateLimited)
		e := api.Errorf(api.CodeKeyRateLimited, "key %s is over its %d tokens per minute (this request may use %d)", k.ID, k.Spec.Budget.TokensPerMinute, tokens)
		e.RetryAfter = until(quota.Minute)
		return e
	}
	u.ring.metrics.ObserveTenantRejection(k.Tenant, api.CodeKeyBudget)
	lim, what, usd, span, resets := l.Day, "daily", k.Spec.Budget.CostUSDPerDay, "day", "it resets at 00:00 UTC"
	switch which {
	case keyMonth:
		lim, what, usd, span, resets = l.Month, "monthly", k.Spec.Budget.CostUSDPerMonth, "month", "it resets on the 1st, 00:00 UTC"
	case keyTotal:
		lim, what, usd, span, resets = l.Total, "lifetime", k.Spec.Budget.CostUSDTotal, "total", "it never resets: raise the key's cost_usd_total or issue another key"
	}
	charged := lim.Charged(k.ID)
	if charged+cost <= gw.NanoFromUSD(usd) {
		e := api.Errorf(api.CodeKeyBudget, "key %s's requests in flight hold what is left of its %s cost limit of $%g ($%g charged so far); retry once they finish",
			k.ID, what, usd, charged.USD())
		e.RetryAfter, e.Pending = api.PendingRetryAfter(u.deadline), true
		return e
	}
	e := api.Errorf(api.CodeKeyBudget, "key %s has reached its %s cost limit of $%g ($%g charged; the next attempt's worst case does not fit); %s",
		k.ID, what, usd, charged.USD(), resets)
	e.RetryAfter = quota.Until(now, span) // none for a lifetime
	if f := u.ring.OnRefused; f != nil {
		f(k.ID, span)
	}
	return e
}

// BudgetError is the refusal of a request the engine stopped at its
// allowance when the key, not the tenant, left no room for the next
// attempt's worst case (cost, tokens); nil otherwise. After n > 0
// attempts, as for the tenant, it is 503 upstream_unavailable.
func (u *Use) BudgetError(n int, cost, tokens gw.NanoUSD) *api.Error {
	if u == nil {
		return nil
	}
	e := u.Refusal(cost, tokens)
	if which := limit(u.refused.Load()); e == nil && which != 0 {
		// The allowance had room (kept elsewhere, it leaves out
		// reservations), but the key's limit refused the reservation.
		e = u.limitError(which, cost, tokens)
	}
	if e != nil && n > 0 {
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered, and key %s's limits leave no room for another attempt after %d", u.key.Stored.ID, n)
	}
	return e
}

// Narrow narrows the engine's allowance (capped: whether there is one)
// to what the key may still reserve: its day's, month's and lifetime's
// cost, and nothing at all when an attempt's tokens do not fit its (or
// its team's) minute.
func (u *Use) Narrow(allowance gw.NanoUSD, capped bool, tokens gw.NanoUSD) (gw.NanoUSD, bool) {
	if u == nil {
		return allowance, capped
	}
	l, id := u.ring.Limits, u.key.Stored.ID
	narrow := func(a gw.NanoUSD) {
		if !capped || a < allowance {
			allowance = a
		}
		capped = true
	}
	for _, lim := range []quota.Ceiling{l.Day, l.Month, l.Total} {
		if a, ok := lim.Allowance(id); ok {
			narrow(a)
		}
	}
	team, _ := u.ring.TeamTokens(u.key)
	for _, who := range []string{id, team} {
		if a, ok := l.Tokens.Allowance(who); ok && tokens > a {
			narrow(0)
		}
	}
	return allowance, capped
}

// Reservations are an attempt's reservations under its key.
type Reservations struct {
	day, month, total, tokens quota.Reservation
	teamTokens                quota.Reservation // the key's team's tokens per minute
	held                      bool
}

// Reserve reserves an attempt's worst case (cost, tokens) under its key,
// until the attempt ends at the latest; false (nothing held) when one
// does not fit, and the Use remembers which limit refused it.
func (u *Use) Reserve(cost, tokens gw.NanoUSD, until time.Time) (Reservations, bool) {
	if u == nil {
		return Reservations{}, true
	}
	l, id := u.ring.Limits, u.key.Stored.ID
	team, _ := u.ring.TeamTokens(u.key)
	var r Reservations
	steps := [...]struct {
		lim   quota.Ceiling
		id    string
		need  gw.NanoUSD
		into  *quota.Reservation
		which limit
	}{
		{l.Tokens, id, tokens, &r.tokens, keyTokens},
		{l.Tokens, team, tokens, &r.teamTokens, teamTokens},
		{l.Day, id, cost, &r.day, keyDay},
		{l.Month, id, cost, &r.month, keyMonth},
		{l.Total, id, cost, &r.total, keyTotal},
	}
	for i, s := range steps {
		res, ok := s.lim.Reserve(s.id, s.need, until)
		if !ok {
			for _, took := range steps[:i] { // give back what the earlier limits hold
				took.lim.Settle(*took.into, 0)
			}
			u.refused.Store(int32(s.which))
			return Reservations{}, false
		}
		*s.into = res
	}
	r.held = true
	return r, true
}

// Settle releases an attempt's reservations under its key and charges
// what it cost and the tokens it used.
func (u *Use) Settle(r Reservations, cost gw.NanoUSD, used gw.Usage) {
	if u == nil || !r.held {
		return
	}
	l, tokens := u.ring.Limits, gw.NanoUSD(used.InputTokens+used.OutputTokens)
	l.Tokens.Settle(r.tokens, tokens)
	l.Tokens.Settle(r.teamTokens, tokens)
	l.Day.Settle(r.day, cost)
	l.Month.Settle(r.month, cost)
	l.Total.Settle(r.total, cost)
	if f := u.ring.OnSpent; f != nil {
		f(u.key.Stored.ID)
	}
}
