package retry

import (
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Purpose says why an attempt was made.
type Purpose string

// The purposes of an attempt.
const (
	PurposeInitial  Purpose = "initial"
	PurposeRetry    Purpose = "retry"    // same route again
	PurposeFallback Purpose = "fallback" // next route by priority
	PurposeResume   Purpose = "resume"   // continue a partial stream
	PurposeRestart  Purpose = "restart"  // fresh generation after output, client cleared it
	PurposeHedge    Purpose = "hedge"    // duplicate after hedge.after without first byte
)

// Attempt is one observed physical attempt as the engine needs it.
type Attempt struct {
	Ordinal    int
	Route      string
	Purpose    Purpose
	NotBefore  time.Time
	StartedAt  time.Time
	ObservedAt time.Time
	// JitterMS is the sampled jitter of the wait before this attempt.
	JitterMS int64
	Kind     gw.Kind
	Cause    gw.Cause
	// RetryAfter is the provider's parsed hint; HasRetryAfter says one was
	// given (a zero hint is a valid "retry now").
	RetryAfter    time.Duration
	HasRetryAfter bool
	VisibleOutput bool
	EmittedTokens int64
	// InToolCall: the stream broke while a tool call was being streamed,
	// which cannot be continued by prefill.
	InToolCall bool
	// Cost is what the attempt is charged: priced usage, or a conservative
	// estimate when the provider reported none.
	Cost gw.NanoUSD
}

// Action is what the engine decided.
type Action string

// The actions. Dispatch starts a logical request; the next four schedule
// another attempt; Hedge duplicates the attempt in flight onto the next
// route (docs/overload.md); Complete and Stop are terminal.
const (
	ActionDispatch Action = "dispatch"
	ActionRetry    Action = "retry_same_route"
	ActionFallback Action = "fallback"
	ActionResume   Action = "resume"
	ActionRestart  Action = "restart"
	ActionHedge    Action = "hedge"
	ActionComplete Action = "complete"
	ActionStop     Action = "stop"
)

// Decision is the engine's answer.
type Decision struct {
	Action Action
	// Route, NotBefore, JitterMS and Reserve describe the next attempt
	// when Action dispatches one.
	Route     string
	NotBefore time.Time
	JitterMS  int64
	Reserve   gw.NanoUSD
	// Terminal and Reason are set when Action is Complete or Stop.
	Terminal gw.Terminal
	Reason   gw.Reason
	// TenantBound: a cost_budget stop came from the tenant's remaining
	// allowance (Admission.TenantAllowance), not the request's own cap.
	TenantBound bool
}

// Dispatches reports whether d schedules another attempt.
func (d Decision) Dispatches() bool {
	switch d.Action {
	case ActionDispatch, ActionRetry, ActionFallback, ActionResume, ActionRestart, ActionHedge:
		return true
	}
	return false
}

// Purpose is the purpose of the attempt d schedules.
func (d Decision) Purpose() Purpose {
	switch d.Action {
	case ActionRetry:
		return PurposeRetry
	case ActionFallback:
		return PurposeFallback
	case ActionResume:
		return PurposeResume
	case ActionRestart:
		return PurposeRestart
	case ActionHedge:
		return PurposeHedge
	}
	return PurposeInitial
}

func (d Decision) String() string {
	if d.Dispatches() {
		return fmt.Sprintf("%s{route=%s not_before=%s}", d.Action, d.Route, d.NotBefore.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%s{terminal=%s reason=%s}", d.Action, d.Terminal, d.Reason)
}

// Admission is the fleet's state at decision time, supplied by the caller
// because it lives outside the request: which routes' breakers refuse new
// attempts, which providers' retry budgets are spent, and what the tenant
// may still reserve today (docs/overload.md).
type Admission struct {
	Refused map[string]bool
	// RetryRefused names the providers whose retry budget is spent: a
	// retry there — an attempt on a provider this request already tried —
	// is not admitted. RetryBudgetSpent says it of every provider.
	RetryRefused     map[string]bool
	RetryBudgetSpent bool
	// Figures are what the strategy chooses among a tier's routes by
	// (absent routes: nothing known).
	Figures map[string]Figures
	// TenantCapped says the tenant has a daily cost ceiling; then
	// TenantAllowance is what it may still reserve (ceiling minus what is
	// charged and reserved), and an attempt whose worst case exceeds it is
	// not dispatched.
	TenantCapped    bool
	TenantAllowance gw.NanoUSD
	// Cooling names the routes a provider's long rate-limit hint cooled
	// down, fleet-wide, and until when (docs/retries.md): a decision skips
	// a route that cools at its time, as it skips an open breaker, while
	// another may take the attempt.
	Cooling map[string]time.Time
}

func (a Admission) admits(route string) bool { return !a.Refused[route] }

// CoolsUntil says whether attempt a — the onRoute-th on its route —
// cools its route down (docs/retries.md): a rate_limited attempt whose
// hint is longer than the route's next backoff, min(base × 2^(k-2), max)
// before jitter, cools the route until a.ObservedAt + hint.
func CoolsUntil(p *Policy, a *Attempt, onRoute int) (time.Time, bool) {
	if a.Kind != gw.KindRateLimited || !a.HasRetryAfter || a.RetryAfter <= Backoff(p.BaseDelay, p.MaxDelay, onRoute+1) {
		return time.Time{}, false
	}
	return a.ObservedAt.Add(a.RetryAfter), true
}

// coolUntil is until when route id cools as a decision at at sees it: the
// later of the admission's cooling and the cooling the request's own
// attempts found (CoolsUntil); zero when it does not cool at at.
func coolUntil(p *Policy, adm Admission, hist []Attempt, id string, at time.Time) time.Time {
	until := adm.Cooling[id]
	n := 0
	for i := range hist {
		if hist[i].Route != id {
			continue
		}
		n++
		if u, ok := CoolsUntil(p, &hist[i], n); ok && u.After(until) {
			until = u
		}
	}
	if !until.After(at) {
		return time.Time{}
	}
	return until
}

// retries reports whether a retry on provider is admitted.
func (a Admission) retries(provider string) bool {
	return !a.RetryBudgetSpent && !a.RetryRefused[provider]
}

// candidate says whether route r may take the next attempt of a request
// with history hist: not a route the request found broken, not on an
// account the request found refused, and not a retry on a provider whose
// retry budget is spent (budget reports the latter).
func candidate(p *Policy, hist []Attempt, r *Route, adm Admission) (ok, budget bool) {
	switch {
	case routeBroken(hist, r.ID), accountRefused(p, hist, r.Provider):
		return false, false
	case tried(p, hist, r.Provider) && !adm.retries(r.Provider):
		return false, true
	}
	return true, false
}

// tried reports whether the request already had an attempt on provider.
func tried(p *Policy, hist []Attempt, provider string) bool {
	for i := range hist {
		if r := p.Route(hist[i].Route); r != nil && r.Provider == provider {
			return true
		}
	}
	return false
}

// accountRefused reports whether the request found provider's account
// refused (its credential or quota): no route on it is tried again.
func accountRefused(p *Policy, hist []Attempt, provider string) bool {
	for i := range hist {
		if r := p.Route(hist[i].Route); r != nil && r.Provider == provider && hist[i].Kind == gw.KindAccountRefused {
			return true
		}
	}
	return false
}

// routeBroken reports whether the request found route itself broken (its
// model or deployment missing: route_unavailable): it is not tried again.
// Other routes on its provider may still serve.
func routeBroken(hist []Attempt, route string) bool {
	for i := range hist {
		if hist[i].Route == route && hist[i].Kind == gw.KindRouteUnavailable {
			return true
		}
	}
	return false
}

// refusesRoute reports whether an outcome rules its route out for the
// rest of the request: a refused account or a broken route. Either moves
// the request on at once.
func refusesRoute(k gw.Kind) bool { return k == gw.KindAccountRefused || k == gw.KindRouteUnavailable }

// affords reports whether the tenant's allowance covers a reservation.
func (a Admission) affords(reserve gw.NanoUSD) bool {
	return !a.TenantCapped || reserve <= a.TenantAllowance
}

// costStop is the stop for a reservation that does not fit: the request's
// own max_cost_usd (spent + reserve) or the tenant's allowance, in that
// order; ok reports that it fits both.
func costStop(p *Policy, hist []Attempt, reserve gw.NanoUSD, adm Admission, t gw.Terminal) (Decision, bool) {
	switch {
	case p.MaxCost > 0 && spent(hist)+reserve > p.MaxCost:
		return stop(t, gw.ReasonCostBudget), false
	case !adm.affords(reserve):
		d := stop(t, gw.ReasonCostBudget)
		d.TenantBound = true
		return d, false
	}
	return Decision{}, true
}

// Errors returned by Decide and Run.
var (
	// ErrAfterTerminal: an attempt was observed after a terminal decision.
	ErrAfterTerminal = errors.New("retry: attempt after a terminal decision")
	// ErrUnexpectedAttempt: an observed attempt is not the one decided.
	ErrUnexpectedAttempt = errors.New("retry: attempt does not match the decision")
	// ErrNoAttempts: Decide was called with no attempts.
	ErrNoAttempts = errors.New("retry: no attempts to decide on")
)

func stop(t gw.Terminal, r gw.Reason) Decision {
	return Decision{Action: ActionStop, Terminal: t, Reason: r}
}

// Start decides a logical request's first attempt at now: the first route
// by priority that the capability filter kept, the breaker admits and
// that does not cool (Admission.Cooling) — unless every such route cools.
func Start(p *Policy, req *Request, adm Admission, now time.Time) Decision {
	if !now.Before(req.Deadline) {
		return stop(gw.TerminalDeadline, gw.ReasonDeadline)
	}
	refused, cooled := false, false
	usable := func(r *Route) bool {
		if !req.eligible(r.ID) {
			return false
		}
		if !adm.admits(r.ID) {
			refused = true
			return false
		}
		return true
	}
	cool := func(r *Route) bool {
		c := !coolUntil(p, adm, nil, r.ID, now).IsZero()
		cooled = cooled || c
		return c
	}
	// A route that cools is skipped while another may serve; when every
	// one cools, the request is dispatched as if none did — the
	// provider's own answer decides then (docs/retries.md).
	var cands []*Route
	for t := 0; t < tierCount(p) && len(cands) == 0; t++ {
		cands = inTier(p, t, func(r *Route) bool { return usable(r) && !cool(r) })
	}
	for t := 0; t < tierCount(p) && len(cands) == 0 && cooled; t++ {
		cands = inTier(p, t, usable)
	}
	if len(cands) > 0 {
		r := choose(p, req, cands, adm, 1)
		reserve := reservation(p, r, req, 0)
		if d, ok := costStop(p, nil, reserve, adm, gw.TerminalExhausted); !ok {
			return d
		}
		return Decision{Action: ActionDispatch, Route: r.ID, NotBefore: now, Reserve: reserve}
	}
	if refused {
		return stop(gw.TerminalExhausted, gw.ReasonCircuitOpen)
	}
	return stop(gw.TerminalRejected, gw.ReasonNonRetryable) // no route can serve the request
}

// Decide returns the decision after the last step of attempts was
// observed: the last attempt, or the last hedged pair (see Hedge). It
// re-checks the history: if an earlier step ended the request whatever the
// fleet's admission was (see settled), or the history is longer than the
// attempt budget, it returns ErrAfterTerminal. Stops that depend on
// admission (a breaker changes which route comes next, and so its wait)
// are the caller's to track; Run does.
func Decide(p *Policy, req *Request, attempts []Attempt, adm Admission) (Decision, error) {
	if len(attempts) == 0 {
		return Decision{}, ErrNoAttempts
	}
	if len(attempts) > p.MaxAttempts {
		return Decision{}, fmt.Errorf("%w: %d attempts exceed max_attempts %d", ErrAfterTerminal, len(attempts), p.MaxAttempts)
	}
	for end := 0; end < len(attempts)-1; end++ {
		if pairedWithNext(attempts, end) {
			continue // the step goes on with its hedge
		}
		if a := deciding(attempts[:end+1]); settled(&a) && (a.Purpose != PurposeResume || p.ResumeRoutes == ResumeSame) {
			return Decision{}, fmt.Errorf("%w: attempt %d follows attempt %d (%s)", ErrAfterTerminal, attempts[end+1].Ordinal, a.Ordinal, a.Kind)
		}
	}
	return decide(p, req, attempts, adm), nil
}

// pairedWithNext reports whether attempt i was hedged by attempt i+1.
func pairedWithNext(hist []Attempt, i int) bool {
	return i+1 < len(hist) && hist[i+1].Purpose == PurposeHedge
}

// deciding returns the attempt whose outcome decides what follows hist.
// That is the last attempt — unless the last two are an attempt and its
// hedge, racing: then the winner decides. The winner is the one that
// reached a decisive outcome (see Decisive) first; the other was cancelled
// as hedge_lost, or had already failed on its own. If neither was
// decisive (both failed before any output), the one observed last
// decides, as of when the pair was over.
func deciding(hist []Attempt) Attempt {
	last := hist[len(hist)-1]
	if last.Purpose != PurposeHedge || len(hist) < 2 {
		return last
	}
	primary := hist[len(hist)-2]
	switch {
	case primary.Cause == gw.CauseHedgeLost:
		return last
	case last.Cause == gw.CauseHedgeLost:
		return primary
	case Decisive(&primary) != Decisive(&last):
		if Decisive(&primary) {
			return primary
		}
		return last
	case primary.ObservedAt.After(last.ObservedAt):
		return primary
	}
	return last
}

// Decisive reports whether an attempt's outcome decides a hedge race: it
// showed output, or it ended the request on its own (see settled). A
// retryable failure before output is not decisive: its rival races on.
func Decisive(a *Attempt) bool { return a.VisibleOutput || settled(a) }

// settled reports whether an attempt's outcome ends its request whatever
// the admission: a success, a cancellation, a failed continuation (unless
// the alias lets other routes continue it: Decide checks), an unknown
// acceptance, or a non-retryable failure other than a context that was
// too small (which may fall back to a larger one).
func settled(a *Attempt) bool {
	switch {
	case a.Kind == gw.KindCancelled, a.Kind.Class() == gw.ClassSuccess, a.Purpose == PurposeResume:
		return true
	case a.Kind == gw.KindUnknownProviderAcceptance:
		return true
	case a.Kind.Class() == gw.ClassNonRetryable:
		return a.Cause != gw.CauseContextLength
	}
	return false
}

func decide(p *Policy, req *Request, hist []Attempt, adm Admission) Decision {
	last := deciding(hist)
	switch {
	case last.Kind == gw.KindCancelled:
		return stop(gw.TerminalCancelled, gw.ReasonCancelled)
	case last.Kind.Class() == gw.ClassSuccess:
		if !last.ObservedAt.Before(req.Deadline) {
			return stop(gw.TerminalDeadline, gw.ReasonDeadline) // a late success loses
		}
		return Decision{Action: ActionComplete, Terminal: gw.TerminalSucceeded, Reason: gw.ReasonCompleted}
	case last.Purpose == PurposeResume && p.ResumeRoutes == ResumeSame:
		// A failed continuation ends the stream as stop would when only
		// the route that broke may continue it (docs/streaming.md).
		return stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)
	case last.Purpose == PurposeResume:
		// A continuation failed, before more output or after: the next
		// route may continue it. Whatever it failed with, the client has
		// seen only the delivered prefix, which any route can extend.
		return resume(p, req, hist, &last, adm)
	case last.Kind == gw.KindStreamInterruptedAfterOutput:
		return afterOutput(p, req, hist, &last, adm)
	case last.Kind.Class() == gw.ClassIndeterminate:
		return stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)
	case last.Kind.Class() == gw.ClassNonRetryable:
		if last.Cause == gw.CauseContextLength {
			return again(p, req, hist, &last, adm, ActionFallback)
		}
		return stop(gw.TerminalRejected, gw.ReasonNonRetryable)
	}
	return again(p, req, hist, &last, adm, ActionRetry)
}

// afterOutput applies the alias's stream.after_output choice.
func afterOutput(p *Policy, req *Request, hist []Attempt, last *Attempt, adm Admission) Decision {
	cur := p.Route(last.Route)
	switch {
	case req.Choices > 1:
		// Several answers: none is resumed or restarted alone.
	case p.AfterOutput == AfterOutputResume && !last.InToolCall && !req.NoContinuation &&
		(p.ResumeRoutes != ResumeSame || cur != nil && cur.Continuation != ContinuationNone):
		return resume(p, req, hist, last, adm)
	case p.AfterOutput == AfterOutputRestart && req.AcceptRestart && last.EmittedTokens < p.RestartMaxTokens:
		d := again(p, req, hist, last, adm, ActionRestart)
		if !d.Dispatches() {
			d.Terminal = gw.TerminalIndeterminate
		}
		return d
	}
	return stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)
}

// resume decides the continuation of a stream that broke after visible
// output. Output was delivered, so whatever stops the continuation leaves
// the request indeterminate, with the binding bound as the reason.
func resume(p *Policy, req *Request, hist []Attempt, last *Attempt, adm Admission) Decision {
	if last.InToolCall || req.NoContinuation {
		// A tool call's arguments, or thinking, cannot be continued by
		// prefill.
		return stop(gw.TerminalIndeterminate, gw.ReasonIndeterminate)
	}
	if d, ok := budgets(p, req, hist, last, adm); !ok {
		d.Terminal = gw.TerminalIndeterminate
		return d
	}
	r, why := continuationRoute(p, req, hist, last, adm)
	if r == nil {
		return stop(gw.TerminalIndeterminate, why)
	}
	reserve := reservation(p, r, req, delivered(hist))
	if d, ok := costStop(p, hist, reserve, adm, gw.TerminalIndeterminate); !ok {
		return d
	}
	return Decision{Action: ActionResume, Route: r.ID, NotBefore: last.ObservedAt, Reserve: reserve}
}

// continuationRoute picks the route that continues a broken stream, or
// says why none may. Same: the route that broke. Any: after a reset, the
// same route once (not after its own continuation failed); else the first
// route after it by priority that can continue, may serve the request, is
// admitted, has attempts left and was never silent in this request; and
// after a stall (a silent route tends to stay silent) the route that
// stalled only when no other can.
func continuationRoute(p *Policy, req *Request, hist []Attempt, last *Attempt, adm Admission) (*Route, gw.Reason) {
	cur := p.Route(last.Route)
	if cur == nil {
		return nil, gw.ReasonIndeterminate // not a route of this policy
	}
	if p.ResumeRoutes == ResumeSame {
		switch {
		case cur.Continuation == ContinuationNone:
			return nil, gw.ReasonIndeterminate
		case routeAttempts(hist, cur.ID) >= cur.MaxAttempts:
			return nil, gw.ReasonRouteBudget
		case !adm.retries(cur.Provider):
			return nil, gw.ReasonRetryBudget
		case !adm.admits(cur.ID):
			return nil, gw.ReasonCircuitOpen
		}
		return cur, ""
	}
	budget := false
	can := func(r *Route) bool {
		if r.Continuation == ContinuationNone || !req.eligible(r.ID) || routeAttempts(hist, r.ID) >= r.MaxAttempts {
			return false
		}
		ok, spent := candidate(p, hist, r, adm)
		budget = budget || spent
		return ok && adm.admits(r.ID)
	}
	again := last.Purpose != PurposeResume && can(cur)
	if again && last.Cause != gw.CauseStall {
		return cur, ""
	}
	refused := false
	for i := p.index(cur.ID) + 1; i < len(p.Routes); i++ {
		r := &p.Routes[i]
		if can(r) && !silent(hist, r.ID) {
			return r, ""
		}
		refused = refused || !adm.admits(r.ID)
	}
	switch {
	case again:
		return cur, ""
	case refused:
		return nil, gw.ReasonCircuitOpen
	case budget:
		return nil, gw.ReasonRetryBudget
	}
	return nil, gw.ReasonRoutesExhausted
}

// silent reports whether a route went silent in this request: a
// first-byte timeout, or a stream that stalled.
func silent(hist []Attempt, route string) bool {
	for i := range hist {
		if hist[i].Route == route && (hist[i].Cause == gw.CauseFirstByteTimeout || hist[i].Cause == gw.CauseStall) {
			return true
		}
	}
	return false
}

// delivered is the visible output of every attempt so far: what a
// continuation's prefix holds.
func delivered(hist []Attempt) int64 {
	var n int64
	for i := range hist {
		n += hist[i].EmittedTokens
	}
	return n
}

// budgets checks the bounds that hold whichever route comes next: the
// deadline as observed and the total attempt budget. (The retry budget is
// a provider's: the route chosen decides whether it binds.)
func budgets(p *Policy, req *Request, hist []Attempt, last *Attempt, adm Admission) (Decision, bool) {
	switch {
	case !last.ObservedAt.Before(req.Deadline):
		return stop(gw.TerminalDeadline, gw.ReasonDeadline), false
	case len(hist) >= p.MaxAttempts:
		return stop(gw.TerminalExhausted, gw.ReasonAttemptBudget), false
	}
	return Decision{}, true
}

// again schedules another attempt after a retryable failure (or a restart,
// or a context-length fallback): the same route while its budget lasts and
// the failure allows it, otherwise the next admitted route by priority —
// and the request's last attempt goes to a provider it has not tried, if
// one may take it, rather than to the one that just failed.
func again(p *Policy, req *Request, hist []Attempt, last *Attempt, adm Admission, action Action) Decision {
	if d, ok := budgets(p, req, hist, last, adm); !ok {
		return d
	}
	cur := p.Route(last.Route)
	if cur == nil {
		return stop(gw.TerminalRejected, gw.ReasonNonRetryable) // not a route of this policy
	}
	moveOn := last.Cause == gw.CauseFirstByteTimeout || last.Cause == gw.CauseContextLength || refusesRoute(last.Kind)
	at := last.ObservedAt
	next, refused, budget := nextRoute(p, req, hist, cur, moveOn, last.Cause == gw.CauseContextLength, adm, len(hist)+1, at)
	switch {
	case next == nil && refused:
		return stop(gw.TerminalExhausted, gw.ReasonCircuitOpen)
	case next == nil && budget:
		return stop(gw.TerminalExhausted, gw.ReasonRetryBudget)
	case next == nil && last.Cause == gw.CauseContextLength:
		return stop(gw.TerminalRejected, gw.ReasonNonRetryable)
	case next == nil && eligibleCount(p, req) == 1:
		return stop(gw.TerminalExhausted, gw.ReasonRouteBudget)
	case next == nil:
		return stop(gw.TerminalExhausted, gw.ReasonRoutesExhausted)
	}
	if next == cur && len(hist)+1 == p.MaxAttempts {
		// The request's last attempt: a provider it has not tried yet is
		// a better bet than one that just failed it.
		if fresh := untriedRoute(p, req, hist, cur, adm, at); fresh != nil {
			next = fresh
		}
	}
	if action == ActionRetry && next != cur {
		action = ActionFallback
	}
	ordinal := len(hist) + 1
	var exp, hint time.Duration
	if next == cur {
		exp = Backoff(p.BaseDelay, p.MaxDelay, routeAttempts(hist, cur.ID)+1)
		if last.HasRetryAfter {
			hint = min(last.RetryAfter, p.RetryAfterCap)
		}
	} else {
		exp = p.BaseDelay
	}
	if u := coolUntil(p, adm, hist, next.ID, at); !u.IsZero() {
		// The route cools and nothing else may serve: wait for it, at
		// most retry_after_cap, as for its own hint.
		hint = max(hint, min(u.Sub(last.ObservedAt), p.RetryAfterCap))
	}
	wait, jit := Jittered(p.Jitter, exp, p.Digest, req.ID, ordinal)
	d := Decision{Action: action, Route: next.ID, NotBefore: last.ObservedAt.Add(max(wait, hint)), JitterMS: jit,
		Reserve: reservation(p, next, req, 0)}
	if stop, ok := costStop(p, hist, d.Reserve, adm, gw.TerminalExhausted); !ok {
		return stop
	}
	if !d.NotBefore.Before(req.Deadline) {
		return stop(gw.TerminalDeadline, gw.ReasonDeadline)
	}
	return d
}

// nextRoute picks the route after cur (docs/routing.md): another route of
// cur's tier the request has not tried, chosen by the strategy; else cur
// itself while its budget lasts (unless the failure moves on); else
// another route of the tier with budget left; else a route of the next
// tier that has one. A context that was too small instead goes to the
// next route by priority with a strictly larger context. A route the
// request found broken, or on an account it found refused, is never
// taken (and the failure moves on at once), nor one that would
// retry a provider whose retry budget is spent. refused reports that a
// breaker turned a candidate away, budget that a retry budget did.
// ordinal is the attempt being decided (it seeds the strategy's draws).
//
// A route that cools at at (coolUntil) is passed over like one whose
// breaker is open — except cur, which is waited for, when no other route
// of its tier may serve and its cooling ends within retry_after_cap and
// before the deadline: only then does waiting not help and the next tier
// serve. When every route left cools, the choice is made as if none did
// (and again waits for the route it picks, at most retry_after_cap).
func nextRoute(p *Policy, req *Request, hist []Attempt, cur *Route, moveOn, larger bool, adm Admission, ordinal int, at time.Time) (next *Route, refused, budget bool) {
	next, refused, budget, cooled := pickRoute(p, req, hist, cur, moveOn, larger, adm, ordinal, at, true)
	if next == nil && cooled {
		next, refused, budget, _ = pickRoute(p, req, hist, cur, moveOn, larger, adm, ordinal, at, false)
	}
	return next, refused, budget
}

// pickRoute is nextRoute's choice; with skipCool it passes over the
// routes that cool at at, and cooled reports that it did.
func pickRoute(p *Policy, req *Request, hist []Attempt, cur *Route, moveOn, larger bool, adm Admission, ordinal int, at time.Time, skipCool bool) (next *Route, refused, budget, cooled bool) {
	usable := func(r *Route) bool {
		if !req.eligible(r.ID) || routeAttempts(hist, r.ID) >= r.MaxAttempts {
			return false
		}
		if ok, spent := candidate(p, hist, r, adm); !ok {
			budget = budget || spent
			return false
		}
		if !adm.admits(r.ID) {
			refused = true
			return false
		}
		return true
	}
	warm := func(r *Route) bool {
		if skipCool && !coolUntil(p, adm, hist, r.ID, at).IsZero() {
			cooled = true
			return false
		}
		return true
	}
	if larger {
		for i := p.index(cur.ID) + 1; i < len(p.Routes); i++ {
			if r := &p.Routes[i]; r.MaxContextTokens > cur.MaxContextTokens && usable(r) && warm(r) {
				return r, refused, budget, cooled
			}
		}
		return nil, refused, budget, cooled
	}
	fresh := inTier(p, p.tierOf(cur), func(r *Route) bool { return r != cur && routeAttempts(hist, r.ID) == 0 && usable(r) && warm(r) })
	if len(fresh) > 0 {
		return choose(p, req, fresh, adm, ordinal), refused, budget, cooled
	}
	curUsable := !moveOn && usable(cur)
	if curUsable && warm(cur) {
		return cur, refused, budget, cooled
	}
	again := inTier(p, p.tierOf(cur), func(r *Route) bool { return r != cur && !silent(hist, r.ID) && usable(r) && warm(r) })
	if len(again) > 0 {
		return choose(p, req, again, adm, ordinal), refused, budget, cooled
	}
	if u := coolUntil(p, adm, hist, cur.ID, at); curUsable && !u.IsZero() && u.Sub(at) <= p.RetryAfterCap && u.Before(req.Deadline) {
		return cur, refused, budget, cooled // it cools, but waiting for it helps
	}
	for t := p.tierOf(cur) + 1; t < tierCount(p); t++ {
		if cands := inTier(p, t, func(r *Route) bool { return usable(r) && warm(r) }); len(cands) > 0 {
			return choose(p, req, cands, adm, ordinal), refused, budget, cooled
		}
	}
	return nil, refused, budget, cooled
}

// untriedRoute is the first route after cur by priority on a provider the
// request has not tried that may take its next attempt and does not cool
// at at, or nil.
func untriedRoute(p *Policy, req *Request, hist []Attempt, cur *Route, adm Admission, at time.Time) *Route {
	for i := p.index(cur.ID) + 1; i < len(p.Routes); i++ {
		r := &p.Routes[i]
		if req.eligible(r.ID) && adm.admits(r.ID) && routeAttempts(hist, r.ID) < r.MaxAttempts && !tried(p, hist, r.Provider) &&
			coolUntil(p, adm, hist, r.ID, at).IsZero() {
			return r
		}
	}
	return nil
}

func spent(hist []Attempt) gw.NanoUSD {
	var s gw.NanoUSD
	for i := range hist {
		s += hist[i].Cost
	}
	return s
}

func routeAttempts(hist []Attempt, id string) int {
	n := 0
	for i := range hist {
		if hist[i].Route == id {
			n++
		}
	}
	return n
}

func eligibleCount(p *Policy, req *Request) int {
	n := 0
	for i := range p.Routes {
		if req.eligible(p.Routes[i].ID) {
			n++
		}
	}
	return n
}
