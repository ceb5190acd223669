package gateway

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/retry"
)

// A virtual key narrows its tenant (docs/keys-and-teams.md): its models, and its
// own rate, tokens, cost and concurrency — and a team's tokens per minute
// are held here too, as a key's are, since every request of a team
// comes with one of its keys — enforced before dispatch with
// the tenants' machinery — each attempt's worst case reserved under the
// key's day, month, lifetime and minute as under the tenant's, and settled at
// its real cost and tokens. The tenant's limits hold over all its keys.

// keyCall is a logical request's virtual key.
type keyCall struct {
	lk *keyring.Key
	// refused is the key's limit that refused the last attempt's
	// reservation (a keyLimit; 0 when none did).
	refused atomic.Int32
}

// keyLimit names one of a key's reserved limits.
type keyLimit int32

const (
	keyTokens keyLimit = iota + 1 // tokens_per_minute
	keyDay                        // cost_usd_per_day
	keyMonth                      // cost_usd_per_month
	keyTotal                      // cost_usd_total
)

// teamTokens is the key's team's tokens_per_minute (docs/keys-and-teams.md,
// "Teams"), kept apart from the key's own limits above.
const teamTokens keyLimit = 100

// enterBoth counts a request in progress for its tenant t and for the
// virtual key it authenticated with, if any (lk), until release is
// called; or refuses it, before its body is read, when either already has
// its max_concurrent in progress.
func (g *Gateway) enterBoth(r *http.Request, t *policy.Tenant) (lk *keyring.Key, release func(), _ *api.Error) {
	releaseTenant, apiErr := g.enter(t)
	if apiErr != nil {
		return nil, nil, apiErr
	}
	if lk = accesslog.KeyOf(r.Context()); lk == nil {
		return nil, releaseTenant, nil
	}
	releaseKey, apiErr := g.keys.Enter(lk)
	if apiErr != nil {
		releaseTenant()
		return nil, nil, apiErr
	}
	return lk, func() { releaseKey(); releaseTenant() }, nil
}

// admitKey checks a new logical request against its virtual key before
// it is placed: gateKey, and whether the cheapest attempt's worst case
// still fits under the key's cost and tokens (429 with Retry-After).
// Nothing is claimed or sent before it passes.
func (c *call) admitKey(lk *keyring.Key) *api.Error {
	if lk == nil {
		return nil
	}
	if e := c.g.keys.Gate(lk, c.alias.Name); e != nil {
		return e
	}
	c.key = &keyCall{lk: lk}
	return c.keyRefusal(c.cheapestAttempt(), c.keyTokens())
}

// keyTokens is the worst case of one attempt in tokens: the prompt's
// estimate and the output cap.
func (c *call) keyTokens() gw.NanoUSD {
	return gw.NanoUSD(c.rec.R.Request.EstimatedInputTokens + c.maxOutput())
}

// keyRefusal is the refusal of an attempt whose worst case (cost, and
// tokens) does not fit what the key may still reserve; nil if it fits.
func (c *call) keyRefusal(cost, tokens gw.NanoUSD) *api.Error {
	l, id := c.g.keys.Limits, c.key.lk.Stored.ID
	if a, capped := l.Tokens.Allowance(id); capped && tokens > a {
		return c.keyLimitError(keyTokens, cost, tokens)
	}
	team, _ := c.g.keys.TeamTokens(c.key.lk)
	if a, capped := l.Tokens.Allowance(team); capped && tokens > a {
		return c.keyLimitError(teamTokens, cost, tokens)
	}
	if a, capped := l.Day.Allowance(id); capped && cost > a {
		return c.keyLimitError(keyDay, cost, tokens)
	}
	if a, capped := l.Month.Allowance(id); capped && cost > a {
		return c.keyLimitError(keyMonth, cost, tokens)
	}
	if a, capped := l.Total.Allowance(id); capped && cost > a {
		return c.keyLimitError(keyTotal, cost, tokens)
	}
	return nil
}

// keyLimitError is the refusal of an attempt (its worst case cost and
// tokens) by one of the key's limits. A cost limit whose charges still
// leave room for the attempt refuses only because reservations of
// requests in flight hold the rest, and they settle for less than they
// hold: key_budget_exceeded still, but come back in about the time they
// take (x-should-retry: true), not at the end of the day or month.
func (c *call) keyLimitError(which keyLimit, cost, tokens gw.NanoUSD) *api.Error {
	k, l, now := c.key.lk.Stored, c.g.keys.Limits, c.g.clock.Now()
	until := func(period func(time.Time) int64) int {
		return int(math.Ceil(max(1, quota.PeriodEnd(now, period).Sub(now).Seconds())))
	}
	if which == teamTokens {
		_, perMinute := c.g.keys.TeamTokens(c.key.lk)
		c.g.metrics.ObserveTenantRejection(k.Tenant, api.CodeTenantRateLimited)
		e := api.Errorf(api.CodeTenantRateLimited, "team %s is over its %d tokens per minute (this request may use %d)", k.Tenant, perMinute, tokens)
		e.RetryAfter = until(quota.Minute)
		return e
	}
	if which == keyTokens {
		c.g.metrics.ObserveTenantRejection(k.Tenant, api.CodeKeyRateLimited)
		e := api.Errorf(api.CodeKeyRateLimited, "key %s is over its %d tokens per minute (this request may use %d)", k.ID, k.Spec.Budget.TokensPerMinute, tokens)
		e.RetryAfter = until(quota.Minute)
		return e
	}
	c.g.metrics.ObserveTenantRejection(k.Tenant, api.CodeKeyBudget)
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
		e.RetryAfter, e.Pending = api.PendingRetryAfter(c.alias.Engine.Deadline), true
		return e
	}
	e := api.Errorf(api.CodeKeyBudget, "key %s has reached its %s cost limit of $%g ($%g charged; the next attempt's worst case does not fit); %s",
		k.ID, what, usd, charged.USD(), resets)
	e.RetryAfter = quota.Until(now, span) // none for a lifetime
	c.g.budgetRefused(scopeKey, k.ID, span)
	return e
}

// keyBudgetError is the refusal of a request the engine stopped at its
// allowance when the key, not the tenant, left no room; nil otherwise.
// After attempts, as for the tenant, it is 503 upstream_unavailable.
func (c *call) keyBudgetError(n int) *api.Error {
	if c.key == nil {
		return nil
	}
	e := c.keyRefusal(c.cheapestAttempt(), c.keyTokens())
	if which := keyLimit(c.key.refused.Load()); e == nil && which != 0 {
		// The allowance had room (kept elsewhere, it leaves out
		// reservations), but the key's limit refused the reservation.
		e = c.keyLimitError(which, c.cheapestAttempt(), c.keyTokens())
	}
	if e != nil && n > 0 {
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered, and key %s's limits leave no room for another attempt after %d", c.key.lk.Stored.ID, n)
	}
	return e
}

// keyAdmission narrows the engine's allowance to what the key may still
// reserve: its day and month cost, and none at all when an attempt's
// tokens do not fit its minute.
func (c *call) keyAdmission(adm *retry.Admission) {
	if c.key == nil {
		return
	}
	l, id := c.g.keys.Limits, c.key.lk.Stored.ID
	narrow := func(a gw.NanoUSD) {
		if !adm.TenantCapped || a < adm.TenantAllowance {
			adm.TenantAllowance = a
		}
		adm.TenantCapped = true
	}
	if a, capped := l.Day.Allowance(id); capped {
		narrow(a)
	}
	if a, capped := l.Month.Allowance(id); capped {
		narrow(a)
	}
	if a, capped := l.Total.Allowance(id); capped {
		narrow(a)
	}
	if a, capped := l.Tokens.Allowance(id); capped && c.keyTokens() > a {
		narrow(0)
	}
	team, _ := c.g.keys.TeamTokens(c.key.lk)
	if a, capped := l.Tokens.Allowance(team); capped && c.keyTokens() > a {
		narrow(0)
	}
}

// keyReservations are an attempt's reservations under its key.
type keyReservations struct {
	day, month, total, tokens quota.Reservation
	teamTokens                quota.Reservation // the key's team's tokens per minute
	held                      bool
}

// reserveKey reserves an attempt's worst case under its key, until the
// attempt ends at the latest; false (nothing held) when one does not fit,
// and the key remembers which limit refused it.
func (c *call) reserveKey(cost gw.NanoUSD, until time.Time) (keyReservations, bool) {
	if c.key == nil {
		return keyReservations{}, true
	}
	l, id := c.g.keys.Limits, c.key.lk.Stored.ID
	refuse := func(which keyLimit, held ...func()) (keyReservations, bool) {
		for _, undo := range held {
			undo()
		}
		c.key.refused.Store(int32(which))
		return keyReservations{}, false
	}
	tokens, ok := l.Tokens.Reserve(id, c.keyTokens(), until)
	if !ok {
		return refuse(keyTokens)
	}
	undoTokens := func() { l.Tokens.Settle(tokens, 0) }
	team, _ := c.g.keys.TeamTokens(c.key.lk)
	teamTok, ok := l.Tokens.Reserve(team, c.keyTokens(), until)
	if !ok {
		return refuse(teamTokens, undoTokens)
	}
	undoTeam := func() { l.Tokens.Settle(teamTok, 0) }
	day, ok := l.Day.Reserve(id, cost, until)
	if !ok {
		return refuse(keyDay, undoTokens, undoTeam)
	}
	month, ok := l.Month.Reserve(id, cost, until)
	if !ok {
		return refuse(keyMonth, undoTokens, undoTeam, func() { l.Day.Settle(day, 0) })
	}
	total, ok := l.Total.Reserve(id, cost, until)
	if !ok {
		return refuse(keyTotal, undoTokens, undoTeam, func() { l.Day.Settle(day, 0) }, func() { l.Month.Settle(month, 0) })
	}
	return keyReservations{day: day, month: month, total: total, tokens: tokens, teamTokens: teamTok, held: true}, true
}

// settleKey releases an attempt's reservations under its key and
// charges what it cost and the tokens it used.
func (c *call) settleKey(r keyReservations, cost gw.NanoUSD, u gw.Usage) {
	if !r.held {
		return
	}
	l := c.g.keys.Limits
	l.Tokens.Settle(r.tokens, gw.NanoUSD(u.InputTokens+u.OutputTokens))
	l.Tokens.Settle(r.teamTokens, gw.NanoUSD(u.InputTokens+u.OutputTokens))
	l.Day.Settle(r.day, cost)
	l.Month.Settle(r.month, cost)
	l.Total.Settle(r.total, cost)
	c.g.watchBudget(scopeKey, c.key.lk.Stored.ID)
}

// keyIDOf is the id of the virtual key a request authenticated with, ""
// for none.
func keyIDOf(r *http.Request) string {
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		return lk.Stored.ID
	}
	return ""
}

// keyNameOf is the name of the virtual key a request authenticated with.
func keyNameOf(r *http.Request) string {
	if lk := accesslog.KeyOf(r.Context()); lk != nil {
		return lk.Stored.Name
	}
	return ""
}
