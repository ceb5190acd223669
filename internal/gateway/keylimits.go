package gateway

import (
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/retry"
)

// A virtual key narrows its tenant (docs/keys.md): its models, and its
// own rate, tokens, cost and concurrency, enforced before dispatch with
// the tenants' machinery — each attempt's worst case reserved under the
// key's day, month and minute as under the tenant's day, and settled at
// its real cost and tokens. The tenant's limits hold over all its keys.

// keyCall is a logical request's virtual key.
type keyCall struct {
	lk *liveKey
}

// enterKey counts a request of key lk in progress until release is
// called, or refuses it when the key already has its max_concurrent in
// progress on this gateway.
func (g *Gateway) enterKey(lk *liveKey) (release func(), _ *apiError) {
	id, limit := lk.k.ID, lk.k.Spec.Budget.MaxConcurrent
	v, ok := g.keys.running.Load(id)
	if !ok {
		v, _ = g.keys.running.LoadOrStore(id, new(atomic.Int64))
	}
	n := v.(*atomic.Int64)
	if running := n.Add(1); limit > 0 && running > int64(limit) {
		n.Add(-1)
		g.metrics.ObserveTenantRejection(lk.k.Tenant, CodeKeyConcurrency)
		e := errorf(CodeKeyConcurrency, "key %s has %d requests in progress, its max_concurrent on this gateway", id, limit)
		e.retryAfter = 1
		return nil, e
	}
	return func() { n.Add(-1) }, nil
}

// admitKey checks a new logical request against its virtual key before
// it is placed: the model allow-list (403 model_not_allowed), the
// request rate, and whether the cheapest attempt's worst case still fits
// under the key's cost and tokens (429 with Retry-After). Nothing is
// claimed or sent before it passes.
func (c *call) admitKey(lk *liveKey) *apiError {
	if lk == nil {
		return nil
	}
	k := lk.k
	if lk.models != nil && !lk.models[c.alias.Name] {
		return &apiError{code: CodeModelNotAllowed, param: "model",
			message: fmt.Sprintf("key %s may not use model `%s` (its models: %v)", k.ID, c.alias.Name, k.Spec.Models)}
	}
	c.key = &keyCall{lk: lk}
	ok, wait, err := c.g.keys.limits.Day.Take(k.ID)
	if err != nil {
		e := errorf(CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
		e.retryAfter = 1
		return e
	}
	if !ok {
		c.g.metrics.ObserveTenantRejection(k.Tenant, CodeKeyRateLimited)
		e := errorf(CodeKeyRateLimited, "key %s is over its %d requests per minute", k.ID, k.Spec.Budget.RequestsPerMinute)
		e.retryAfter = int(math.Ceil(max(1, wait.Seconds())))
		return e
	}
	return c.keyRefusal(c.cheapestAttempt(), c.keyTokens())
}

// keyTokens is the worst case of one attempt in tokens: the prompt's
// estimate and the output cap.
func (c *call) keyTokens() gw.NanoUSD {
	return gw.NanoUSD(c.rec.R.Request.EstimatedInputTokens + c.maxOutput())
}

// keyRefusal is the refusal of an attempt whose worst case (cost, and
// tokens) does not fit what the key may still reserve; nil if it fits.
func (c *call) keyRefusal(cost, tokens gw.NanoUSD) *apiError {
	k, l, now := c.key.lk.k, c.g.keys.limits, c.g.clock.Now()
	until := func(period func(time.Time) int64) int {
		return int(math.Ceil(max(1, quota.PeriodEnd(now, period).Sub(now).Seconds())))
	}
	if a, capped := l.Tokens.Allowance(k.ID); capped && tokens > a {
		c.g.metrics.ObserveTenantRejection(k.Tenant, CodeKeyRateLimited)
		e := errorf(CodeKeyRateLimited, "key %s is over its %d tokens per minute (this request may use %d)", k.ID, k.Spec.Budget.TokensPerMinute, tokens)
		e.retryAfter = until(quota.Minute)
		return e
	}
	if a, capped := l.Day.Allowance(k.ID); capped && cost > a {
		c.g.metrics.ObserveTenantRejection(k.Tenant, CodeKeyBudget)
		e := errorf(CodeKeyBudget, "key %s has reached its daily cost limit of $%g (the next attempt's worst case does not fit); it resets at 00:00 UTC",
			k.ID, k.Spec.Budget.CostUSDPerDay)
		e.retryAfter = until(gw.Day)
		return e
	}
	if a, capped := l.Month.Allowance(k.ID); capped && cost > a {
		c.g.metrics.ObserveTenantRejection(k.Tenant, CodeKeyBudget)
		e := errorf(CodeKeyBudget, "key %s has reached its monthly cost limit of $%g (the next attempt's worst case does not fit); it resets on the 1st, 00:00 UTC",
			k.ID, k.Spec.Budget.CostUSDPerMonth)
		e.retryAfter = until(quota.Month)
		return e
	}
	return nil
}

// keyBudgetError is the refusal of a request the engine stopped at its
// allowance when the key, not the tenant, left no room; nil otherwise.
// After attempts, as for the tenant, it is 503 upstream_unavailable.
func (c *call) keyBudgetError(n int) *apiError {
	if c.key == nil {
		return nil
	}
	e := c.keyRefusal(c.cheapestAttempt(), c.keyTokens())
	if e != nil && n > 0 {
		return errorf(CodeUpstreamUnavailable, "no provider answered, and key %s's limits leave no room for another attempt after %d", c.key.lk.k.ID, n)
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
	l, id := c.g.keys.limits, c.key.lk.k.ID
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
	if a, capped := l.Tokens.Allowance(id); capped && c.keyTokens() > a {
		narrow(0)
	}
}

// keyReservations are an attempt's reservations under its key.
type keyReservations struct {
	day, month, tokens quota.Reservation
	held               bool
}

// reserveKey reserves an attempt's worst case under its key, until the
// attempt ends at the latest; false (nothing held) when one does not fit.
func (c *call) reserveKey(cost gw.NanoUSD, until time.Time) (keyReservations, bool) {
	if c.key == nil {
		return keyReservations{}, true
	}
	l, id := c.g.keys.limits, c.key.lk.k.ID
	tokens, ok := l.Tokens.Reserve(id, c.keyTokens(), until)
	if !ok {
		return keyReservations{}, false
	}
	day, ok := l.Day.Reserve(id, cost, until)
	if !ok {
		l.Tokens.Settle(tokens, 0)
		return keyReservations{}, false
	}
	month, ok := l.Month.Reserve(id, cost, until)
	if !ok {
		l.Tokens.Settle(tokens, 0)
		l.Day.Settle(day, 0)
		return keyReservations{}, false
	}
	return keyReservations{day: day, month: month, tokens: tokens, held: true}, true
}

// settleKey releases an attempt's reservations under its key and
// charges what it cost and the tokens it used.
func (c *call) settleKey(r keyReservations, cost gw.NanoUSD, u gw.Usage) {
	if !r.held {
		return
	}
	l := c.g.keys.limits
	l.Tokens.Settle(r.tokens, gw.NanoUSD(u.InputTokens+u.OutputTokens))
	l.Day.Settle(r.day, cost)
	l.Month.Settle(r.month, cost)
}

// keyIDOf is the id of the virtual key a request authenticated with, ""
// for none.
func keyIDOf(r *http.Request) string {
	if lk := keyOf(r.Context()); lk != nil {
		return lk.k.ID
	}
	return ""
}
