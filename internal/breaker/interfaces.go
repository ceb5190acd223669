package breaker

import "github.com/oncegate/oncegate/internal/gw"

// Admitter admits attempts per route (docs/overload.md). *Set keeps the
// breakers in this process; the Redis coordination keeps them across
// replicas.
type Admitter interface {
	// Allows reports, without taking anything, whether route would admit
	// an attempt now.
	Allows(route string) bool
	// Acquire admits an attempt on route, or refuses (ok false). Every
	// admitted ticket goes back to Done with the attempt's outcome.
	Acquire(route string) (t Ticket, ok bool)
	// Done reports an admitted attempt's outcome.
	Done(route string, t Ticket, o Outcome)
}

// Retries is the fleet retry budget, per provider (docs/overload.md).
// *Budget implements it in one process.
type Retries interface {
	// First counts a logical request's first attempt on provider.
	First(provider string)
	// Allows reports, without taking it, whether one more retry on
	// provider fits.
	Allows(provider string) bool
	// Retry takes one retry on provider; false means its budget is spent.
	Retry(provider string) bool
}

// breakerStates is what a Breakers implementation offers to export
// oncegate_breaker_state; Set does.
type StateLister interface {
	States(f func(route string, st State, gen int64))
}

// breakerOutcome is what an attempt says about its route's health. A
// failure of the route (no answer, an overloaded or broken answer) counts
// against it; an answer counts for it; what the caller or the request
// caused (it left, it lost a hedge, it was refused as invalid or unsafe)
// says nothing about the route.
// OutcomeOf is what an attempt of outcome kind k tells its route's
// breaker: a broken route's kinds are failures, the caller's and the
// request's own are ignored.
func OutcomeOf(k gw.Kind) Outcome {
	switch k {
	case gw.KindOK:
		return Success
	case gw.KindAccountRefused, gw.KindRouteUnavailable: // the route's credential, quota, model or deployment is broken
		return Failure
	case gw.KindTimeoutBeforeResponse, gw.KindRateLimited, gw.KindUnavailable, gw.KindProtocolViolation,
		gw.KindUnknownProviderAcceptance, gw.KindStreamInterruptedAfterOutput:
		return Failure
	}
	return Ignore
}

var (
	_ Admitter    = (*Set)(nil)
	_ Retries     = (*Budget)(nil)
	_ StateLister = (*Set)(nil)
)
