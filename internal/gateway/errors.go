package gateway

import (
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// terminalError is the client error for a logical request that ended
// without an answer and before any output (docs/errors.md). Each names the
// bound that stopped it, with its numbers.
func (c *call) terminalError(d retry.Decision, last *attemptResult) *api.Error {
	t, r := d.Terminal, d.Reason
	if last != nil && last.kind == gw.KindAccountRefused {
		what := "credential; the gateway's operator must fix the route's key"
		if last.obs.Cause == gw.CauseQuota {
			what = "account for its quota or billing; the gateway's operator must fund it"
		}
		return api.Errorf(api.CodeUpstreamAuthFailed, "the provider of route %s refused the gateway's own %s (no other route could serve the request; nothing was wrong with it)", last.route.ID, what)
	}
	if last != nil && last.kind == gw.KindRouteUnavailable {
		return api.Errorf(api.CodeRouteUnavailable, "the provider of route %s does not serve its model or deployment %q (no other route could serve the request; nothing was wrong with it); the gateway's operator must fix the route",
			last.route.ID, last.route.Model)
	}
	if last != nil && last.upstreamErr != nil && t == gw.TerminalRejected && last.kind != gw.KindProtocolViolation {
		return &api.Error{Upstream: last.upstreamErr, Code: api.CodeInvalidRequest}
	}
	n, pol := len(c.rec.R.Attempts), c.alias.Engine
	if e := c.coordinationDown(d, n); e != nil {
		return e
	}
	switch {
	case t == gw.TerminalDeadline:
		return api.Errorf(api.CodeDeadline, "the request's deadline (%s after it arrived) passed before an answer arrived, after %d attempts",
			c.deadline.Sub(c.created).Round(time.Millisecond), n)
	case r == gw.ReasonCircuitOpen:
		return api.Errorf(api.CodeCircuitOpen, "the circuit breaker of every route that could serve model %q is open; no attempt was made after %d", c.alias.Name, n)
	case r == gw.ReasonRetryBudget:
		return api.Errorf(api.CodeRetryBudget, "the fleet retry budget is exhausted (an outage is being contained); %d attempts were made and none is retried", n)
	case r == gw.ReasonCostBudget && d.TenantBound:
		if e := c.key.BudgetError(n, c.cheapestAttempt(), c.keyTokens()); e != nil {
			return e
		}
		refused := ""
		if r := c.tenantRefused.Load(); r != nil {
			refused = *r
		}
		return c.g.costs.Refusal(c.tenant, c.cheapestAttempt(), refused, n, c.alias.Engine.Deadline)
	case r == gw.ReasonCostBudget && n == 0:
		e := api.Errorf(api.CodeInvalidRequest, "the worst case of one attempt (~%d prompt tokens plus %d output tokens) costs more than model %q allows per request (max_cost_usd $%g); lower max_tokens or shorten the prompt",
			c.rec.R.Request.EstimatedInputTokens, c.maxOutput(), c.alias.Name, pol.MaxCost.USD())
		e.Param = "max_tokens"
		return e
	case r == gw.ReasonCostBudget:
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered, and the request's cost budget (max_cost_usd $%g) does not allow another attempt after %d", pol.MaxCost.USD(), n)
	case t == gw.TerminalIndeterminate && c.turn != nil:
		return c.turnUnknownError()
	case t == gw.TerminalIndeterminate:
		return api.Errorf(api.CodeOutcomeUnknown, "the provider may have accepted the request; its outcome is unknown")
	case t == gw.TerminalRejected && last != nil && last.kind == gw.KindProtocolViolation:
		return api.Errorf(api.CodeProtocolViolation, "the provider's response could not be read: %s", last.detail)
	case t == gw.TerminalRejected && n == 0:
		return api.Errorf(api.CodeInvalidRequest, "no route of model %q can serve the request: %s", c.alias.Name, ineligible(c.rec.R.Request.IneligibleRoutes))
	case t == gw.TerminalRejected && last != nil && last.kind == gw.KindInvalidRequest && last.detail != "":
		// A route's own translation refused it: name what it refused.
		return api.Errorf(api.CodeInvalidRequest, "no route of model %q can serve the request: %s: %s", c.alias.Name, last.route.ID, last.detail)
	case t == gw.TerminalRejected:
		return api.Errorf(api.CodeInvalidRequest, "no route of model %q can serve the request", c.alias.Name)
	case allRateLimited(c.rec.R.Attempts):
		return api.Errorf(api.CodeUpstreamUnavailable, "every provider of model %q answered 429 rate limited (%d attempts, %s)", c.alias.Name, n, r)
	case r == gw.ReasonAttemptBudget:
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered within %d attempts (max_attempts %d)", n, pol.MaxAttempts)
	case r == gw.ReasonRouteBudget:
		return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered within %d attempts (the route's max_attempts)", n)
	}
	return api.Errorf(api.CodeUpstreamUnavailable, "no provider answered: every route of model %q was tried (%d attempts, %s)", c.alias.Name, n, r)
}

// ineligible names why each route cannot serve a request: "primary: no
// image input; fallback: context too small".
func ineligible(reasons map[string]string) string {
	if len(reasons) == 0 {
		return "none is eligible"
	}
	parts := make([]string, 0, len(reasons))
	for route, why := range reasons {
		parts = append(parts, route+": "+why)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// allRateLimited reports whether every attempt was refused with a 429.
func allRateLimited(as []receipt.Attempt) bool {
	for _, a := range as {
		if a.Kind != string(gw.KindRateLimited) {
			return false
		}
	}
	return len(as) > 0
}

// coordinationDown is the error for a request the engine stopped because
// a shared bound refused it while the shared coordination was unreachable:
// the refusal says nothing about the breakers, budgets or tenant, and
// the client should hear what did happen.
func (c *call) coordinationDown(d retry.Decision, attempts int) *api.Error {
	if c.g.coordHealth == nil {
		return nil
	}
	switch r := d.Reason; {
	case r == gw.ReasonCircuitOpen, r == gw.ReasonRetryBudget, r == gw.ReasonCostBudget && d.TenantBound:
	default:
		return nil
	}
	err := c.g.coordHealth.Err()
	if err == nil {
		return nil
	}
	e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination is unreachable, so no attempt could be admitted after %d; retry shortly", attempts)
	e.NoRetry = attempts > 0
	return e
}

// cheapestAttempt is the smallest worst case an attempt of this request
// reserves on any route that may serve it.
func (c *call) cheapestAttempt() gw.NanoUSD {
	req, least := c.rec.Request(), gw.NanoUSD(-1)
	for i := range c.alias.Engine.Routes {
		r := &c.alias.Engine.Routes[i]
		if _, out := req.Ineligible[r.ID]; out {
			continue
		}
		if w := retry.Reservation(c.alias.Engine, r, req, 0); least < 0 || w < least {
			least = w
		}
	}
	return max(0, least)
}

// maxOutput is the output cap an attempt reserves for: the request's
// max_tokens, else the first route's maximum.
func (c *call) maxOutput() int64 {
	out := c.alias.Routes[0].Caps.MaxOutputTokens
	if m := c.in.IR.MaxTokens; m > 0 && (out == 0 || m < out) {
		out = m
	}
	return out
}
