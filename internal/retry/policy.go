// Package retry is oncegate's retry engine (docs/retries.md): a pure,
// deterministic function from (policy, request, attempts so far, admission)
// to the next decision. It does no I/O, reads no clock and uses no global
// randomness: times come in on the attempts, jitter comes from a PRNG seeded
// by the policy digest, the request id and the attempt ordinal, so the same
// history always replays to the same decisions. The gateway drives it; the
// verifier re-runs it over a receipt.
package retry

import (
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Jitter selects how backoff is randomised (docs/retries.md).
type Jitter string

// The jitter modes.
const (
	JitterFull Jitter = "full" // uniform in [0, backoff]
	JitterNone Jitter = "none" // exactly the backoff
)

// ResumeRoutes says which routes may continue a stream that broke after
// visible output (docs/streaming.md).
type ResumeRoutes string

// The choices. Any: the alias's routes in priority order (they are
// validated interchangeable): after a stall the next at once, after a
// reset the same route once, then the next. Same: only the route that
// broke, and a failed continuation ends the stream.
const (
	ResumeAny  ResumeRoutes = "any"
	ResumeSame ResumeRoutes = "same"
)

// AfterOutput is what happens when a stream breaks after visible output
// (docs/streaming.md).
type AfterOutput string

// The after-output modes.
const (
	AfterOutputResume  AfterOutput = "resume"
	AfterOutputRestart AfterOutput = "restart"
	AfterOutputStop    AfterOutput = "stop"
)

// Continuation is how a route continues a partial answer (docs/streaming.md).
type Continuation string

// The continuation styles.
const (
	ContinuationNone        Continuation = "none"
	ContinuationPrefill     Continuation = "assistant_prefill"
	ContinuationPrefixFlag  Continuation = "prefix_flag"
	ContinuationContinueMsg Continuation = "continue_final_message"
)

// Route is one route of an alias as the engine sees it.
type Route struct {
	ID string
	// Provider is the route's provider (its account and the capacity
	// behind its base URL): routes that share one share its retry budget
	// and its credential.
	Provider         string
	MaxAttempts      int
	MaxContextTokens int64
	MaxOutputTokens  int64
	Price            gw.Price
	Continuation     Continuation
	// Tier is the route's place among the alias's tiers (0 first) when
	// the policy is Tiered: routes of one tier share load
	// (Policy.Strategy); the next tier serves only when no route of this
	// one may.
	Tier int
	// Weight is the route's share of its tier under StrategyWeighted
	// (at least 1).
	Weight int
}

// Policy is an alias's compiled retry policy. Routes are in priority order.
// A Policy is immutable once built and safe for concurrent use.
type Policy struct {
	// Digest is the hex SHA-256 of the canonical alias policy; it seeds
	// jitter and identifies the policy in receipts.
	Digest           string
	MaxAttempts      int
	BaseDelay        time.Duration
	MaxDelay         time.Duration
	RetryAfterCap    time.Duration
	Jitter           Jitter
	Deadline         time.Duration
	MaxCost          gw.NanoUSD // 0: no cost cap
	AfterOutput      AfterOutput
	RestartMaxTokens int64
	// ResumeRoutes says which routes may continue a broken stream.
	ResumeRoutes ResumeRoutes
	// HedgeAfter is how long an attempt may go without a first byte before
	// a hedge is dispatched (docs/overload.md); 0 disables hedging.
	HedgeAfter time.Duration
	// DefaultOutputTokens is the output limit of a request whose client
	// set none (0: each route's MaxOutputTokens), at most the route's.
	DefaultOutputTokens int64
	// Strategy is how a tier of several routes shares load ("": ordered).
	Strategy Strategy
	// Tiered says the routes' Tier fields group them; otherwise each
	// route is a tier of its own, in priority order.
	Tiered bool
	Routes []Route
}

// Route returns the route with id, or nil.
func (p *Policy) Route(id string) *Route {
	for i := range p.Routes {
		if p.Routes[i].ID == id {
			return &p.Routes[i]
		}
	}
	return nil
}

func (p *Policy) index(id string) int {
	for i := range p.Routes {
		if p.Routes[i].ID == id {
			return i
		}
	}
	return -1
}

// Request is what the engine knows about one logical request.
type Request struct {
	// ID is the logical request id; it seeds jitter.
	ID string
	// Deadline is absolute: min(created + policy deadline, caller budgets).
	Deadline time.Time
	// InputTokens estimates the prompt, for cost reservation.
	InputTokens int64
	// MaxOutputTokens is the request's output cap; 0 means each route's
	// own maximum.
	MaxOutputTokens int64
	// AcceptRestart: the client sent X-Oncegate-Accept-Restart: 1.
	AcceptRestart bool
	// NoContinuation: the answer cannot be continued by prefill (it
	// carries extended thinking), so a stream that breaks after output is
	// never resumed.
	NoContinuation bool
	// Choices is how many answers the request asked for (OpenAI's n); 0
	// or 1: one. Each may be as long as the output limit, so an attempt
	// reserves that many times its output; and several answers cannot be
	// continued or restarted as one, so a stream of several that breaks
	// after output stops (docs/streaming.md).
	Choices int
	// Stateful: the operation writes provider-side state (docs/conversations.md), so
	// it is never hedged.
	Stateful bool
	// Ineligible lists routes the capability pre-filter ruled out before
	// the first dispatch (docs/configuration.md); they are skipped, never tried.
	Ineligible map[string]string
}

// Deadline computes a logical request's absolute deadline: the earliest of
// the policy deadline and every caller budget (X-Oncegate-Timeout-Ms,
// x-stainless-timeout). Non-positive budgets are ignored.
func Deadline(created time.Time, policy time.Duration, callerBudgets ...time.Duration) time.Time {
	d := policy
	for _, b := range callerBudgets {
		if b > 0 && (d <= 0 || b < d) {
			d = b
		}
	}
	return created.Add(d)
}

func (r *Request) eligible(id string) bool {
	_, out := r.Ineligible[id]
	return !out
}

// Validate reports the first structural problem in p. Compiled policies
// are always valid; hand-built ones (tests, verify) are checked.
func (p *Policy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("max_attempts %d < 1", p.MaxAttempts)
	case len(p.Routes) == 0:
		return fmt.Errorf("no routes")
	case p.BaseDelay < 0 || p.MaxDelay < p.BaseDelay:
		return fmt.Errorf("base_delay %v / max_delay %v out of order", p.BaseDelay, p.MaxDelay)
	case p.Jitter != JitterFull && p.Jitter != JitterNone:
		return fmt.Errorf("unknown jitter %q", p.Jitter)
	}
	for _, r := range p.Routes {
		if r.MaxAttempts < 1 {
			return fmt.Errorf("route %s: max_attempts %d < 1", r.ID, r.MaxAttempts)
		}
	}
	return nil
}
