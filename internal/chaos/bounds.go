package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/retry"
)

// usdSlack absorbs float rounding in sums of costs.
const usdSlack = 1e-9

// bounds checks that no attempt went past a bound: a deadline, a budget,
// a data boundary, an indeterminate outcome. Each bound is read from the
// soak's policy and from what the clients sent, never from what a
// receipt says of itself; the receipts' attempts are tied to real calls
// by the first invariant.
func bounds(receipts map[string]*receipt.Receipt, outcomes []outcome, pol *policy.Policy, example func(string, ...any)) []Row {
	asked := map[string]time.Duration{} // request id → the client's own deadline
	refused, pending := 0, 0            // 429 tenant_budget_exceeded and tenant_budget_pending answers clients got
	for _, o := range outcomes {
		if o.prof.timeoutMS > 0 && o.requestID != "" {
			asked[o.requestID] = time.Duration(o.prof.timeoutMS) * time.Millisecond
		}
		switch {
		case strings.Contains(o.err, "tenant_budget_exceeded"):
			refused++
		case strings.Contains(o.err, "tenant_budget_pending"):
			pending++
		}
	}
	term := Row{Invariant: "zero attempts after a terminal"}
	dl := Row{Invariant: "zero attempts after a deadline"}
	budget := Row{Invariant: "zero attempts beyond a budget"}
	boundary := Row{Invariant: "zero attempts outside a data boundary"}
	blind := Row{Invariant: "zero blind re-dispatches of an indeterminate request"}
	var underClient, byDeadline, byCost, restricted, restrictedAttempts, indeterminate int
	type tenantDay struct {
		tenant string
		day    int64
	}
	spent, overEstimate := map[tenantDay]float64{}, map[tenantDay]float64{}
	for id, r := range receipts {
		a, t := pol.Alias(r.Model), pol.Tenant(r.Tenant)
		if a == nil || t == nil {
			boundary.Checked++
			boundary.Violations++
			example("%s: model %q or tenant %q is not in the policy", id, r.Model, r.Tenant)
			continue
		}

		// A terminal: nothing after the engine's stop, nor after the
		// attempt that answered.
		term.Checked++
		last := 0
		for _, d := range r.Decisions {
			if d.Action == string(retry.ActionStop) || d.Action == string(retry.ActionComplete) {
				last = d.AfterAttempt
				break
			}
		}
		for _, at := range r.Attempts {
			if at.Kind == string(gw.KindOK) && (last == 0 || at.Ordinal < last) {
				last = at.Ordinal
			}
		}
		if n := len(r.Attempts); last > 0 && n > 0 && r.Attempts[n-1].Ordinal > last {
			term.Violations++
			example("%s: attempt %d after the terminal at attempt %d", id, r.Attempts[n-1].Ordinal, last)
		}

		// A deadline: the policy's, or the client's when it is sooner.
		// No attempt starts at or after it, and no success observed at
		// or after it is delivered.
		dl.Checked++
		limit := a.Engine.Deadline
		if d, ok := asked[id]; ok {
			underClient++
			limit = min(limit, d)
		}
		if r.Reason == string(gw.ReasonDeadline) {
			byDeadline++
		}
		late := ""
		if r.Deadline.After(r.CreatedAt.Add(limit)) {
			late = fmt.Sprintf("its deadline is %v after its start, the bound %v", r.Deadline.Sub(r.CreatedAt), limit)
		}
		for _, at := range r.Attempts {
			switch {
			case !at.StartedAt.Before(r.Deadline):
				late = fmt.Sprintf("attempt %d started %v after the deadline", at.Ordinal, at.StartedAt.Sub(r.Deadline))
			case at.Kind == string(gw.KindOK) && r.Terminal == string(gw.TerminalSucceeded) && !at.ObservedAt.Before(r.Deadline):
				late = fmt.Sprintf("attempt %d succeeded %v after the deadline and was delivered", at.Ordinal, at.ObservedAt.Sub(r.Deadline))
			}
		}
		if late != "" {
			dl.Violations++
			example("%s: %s", id, late)
		}

		// Budgets: attempts in all and per route, and cost. An attempt
		// reserves its worst case before it is sent; its real cost can
		// pass that only by how much the provider's input count passed
		// the gateway's estimate (docs/overload.md), which is allowed.
		budget.Checked++
		perRoute := map[string]int{}
		var cost, over float64
		for _, at := range r.Attempts {
			perRoute[at.Route]++
			cost += at.CostUSD
			over += max(0, at.CostUSD-at.ReservedUSD)
		}
		past := ""
		if len(r.Attempts) > a.Engine.MaxAttempts {
			past = fmt.Sprintf("%d attempts, the alias allows %d", len(r.Attempts), a.Engine.MaxAttempts)
		}
		for route, n := range perRoute {
			if rt := a.Engine.Route(route); rt != nil && n > rt.MaxAttempts {
				past = fmt.Sprintf("%d attempts on route %s, which allows %d", n, route, rt.MaxAttempts)
			}
		}
		if a.Engine.MaxCost > 0 && cost > a.Engine.MaxCost.USD()+over+usdSlack {
			past = fmt.Sprintf("cost %.9f USD, the alias allows %.9f", cost, a.Engine.MaxCost.USD())
		}
		if past != "" {
			budget.Violations++
			example("%s: %s", id, past)
		}
		if r.Reason == string(gw.ReasonCostBudget) {
			byCost++
		}
		k := tenantDay{r.Tenant, r.CreatedAt.UTC().Unix() / 86400}
		spent[k] += cost
		overEstimate[k] += over

		// The data boundary: every attempt on one of the alias's routes
		// that the tenant may use.
		boundary.Checked++
		if t.MaxBoundary < gw.BoundaryExternal {
			restricted++
		}
		for _, at := range r.Attempts {
			rt := a.Route(at.Route)
			switch {
			case rt == nil:
				boundary.Violations++
				example("%s: attempt %d on route %q, not one of %s's", id, at.Ordinal, at.Route, a.Name)
			case rt.Boundary > t.MaxBoundary:
				boundary.Violations++
				example("%s: attempt %d on %s (%s) for tenant %s (at most %s)", id, at.Ordinal, rt.ID, rt.Boundary, t.ID, t.MaxBoundary)
			case t.MaxBoundary < gw.BoundaryExternal:
				restrictedAttempts++
			}
		}

		// Indeterminate: an attempt whose outcome nobody knows ends the
		// request, unless a stateful route's conversation showed it
		// was never committed (reconciled absent).
		blind.Checked++
		if r.Terminal == string(gw.TerminalIndeterminate) {
			indeterminate++
		}
		for j, at := range r.Attempts {
			// A stream cut after visible output may be continued or
			// restarted as the alias says (docs/streaming.md): that is no
			// blind re-dispatch, whatever else follows it is.
			if at.OutcomeClass == string(gw.ClassIndeterminate) && at.Reconciled != "absent" && j < len(r.Attempts)-1 &&
				(at.Kind != string(gw.KindStreamInterruptedAfterOutput) || !continues(r.Attempts[j+1].Purpose)) {
				blind.Violations++
				example("%s: attempt %d (%s on %s) was indeterminate and attempt %d followed it", id, at.Ordinal, at.Kind, at.Route, r.Attempts[j+1].Ordinal)
			}
		}
	}
	capped := ""
	for k, usd := range spent {
		t := pol.Tenant(k.tenant)
		if t.CostPerDay <= 0 {
			continue
		}
		budget.Checked++
		capped += fmt.Sprintf("; tenant %s spent %.6f of %.6f USD", t.ID, usd, t.CostPerDay.USD())
		if usd > t.CostPerDay.USD()+overEstimate[k]+usdSlack {
			budget.Violations++
			example("tenant %s spent %.9f USD on day %d, its ceiling is %.9f", t.ID, usd, k.day, t.CostPerDay.USD())
		}
	}
	dl.Note = fmt.Sprintf("%d under a client deadline; %d ended by a deadline", underClient, byDeadline)
	budget.Note = fmt.Sprintf("%d stopped by the cost cap, %d refused tenant_budget_exceeded, %d tenant_budget_pending%s", byCost, refused, pending, capped)
	boundary.Note = fmt.Sprintf("%d requests of a private-only tenant, with %d attempts on private routes", restricted, restrictedAttempts)
	blind.Note = fmt.Sprintf("%d requests ended indeterminate", indeterminate)
	return []Row{term, dl, budget, boundary, blind}
}

// continues reports whether an attempt's purpose carries on a stream that
// broke after visible output.
func continues(purpose string) bool { return purpose == "resume" || purpose == "restart" }
