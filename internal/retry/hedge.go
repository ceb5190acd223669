package retry

import (
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Hedging and what an attempt reserves: the engine's answers about an
// attempt besides whether to make it (docs/overload.md, docs/retries.md).

// Hedge decides whether to hedge the attempt in flight, which primary
// dispatched and which has shown no first byte by at (docs/overload.md): one
// duplicate on the next eligible route by priority that the breaker admits
// and whose budget allows it, started at once. Both attempts count against
// every budget: the attempt budget must hold both, the cost budget both
// reservations. It never hedges a stateful operation, a continuation, or anything after
// visible output; ok is false when there is nothing to hedge to.
func Hedge(p *Policy, req *Request, hist []Attempt, primary Decision, adm Admission, at time.Time) (Decision, bool) {
	switch {
	case p.HedgeAfter <= 0 || req.Stateful || !primary.Dispatches() || primary.Action == ActionHedge:
		return Decision{}, false
	case primary.Action == ActionResume || primary.Action == ActionRestart:
		return Decision{}, false
	case !at.Before(req.Deadline) || len(hist)+2 > p.MaxAttempts:
		return Decision{}, false
	}
	for i := range hist {
		if hist[i].VisibleOutput {
			return Decision{}, false
		}
	}
	cur := p.Route(primary.Route)
	if cur == nil {
		return Decision{}, false
	}
	inFlight := append(hist[:len(hist):len(hist)], Attempt{Route: cur.ID, Cost: primary.Reserve})
	next, _, _ := nextRoute(p, req, inFlight, cur, true, false, adm, len(inFlight)+1, at)
	if next == nil || !coolUntil(p, adm, hist, next.ID, at).IsZero() {
		return Decision{}, false
	}
	d := Decision{Action: ActionHedge, Route: next.ID, NotBefore: at, Reserve: reservation(p, next, req, 0)}
	if _, ok := costStop(p, inFlight, d.Reserve, adm, gw.TerminalExhausted); !ok {
		return Decision{}, false
	}
	return d, true
}

// reservation is the worst-case cost of one attempt on r (docs/retries.md):
// the prompt estimate (plus any continuation prefix) at the input price and
// the output cap at the output price.
func reservation(p *Policy, r *Route, req *Request, prefixTokens int64) gw.NanoUSD {
	return r.Price.WorstCase(req.InputTokens+prefixTokens, OutputLimit(p, r, req.MaxOutputTokens)*int64(max(1, req.Choices)))
}

// Reservation is the worst-case cost of an attempt on route r with a
// continuation prefix of prefixTokens.
func Reservation(p *Policy, r *Route, req *Request, prefixTokens int64) gw.NanoUSD {
	return reservation(p, r, req, prefixTokens)
}

// OutputLimit is the output limit of an attempt on route r, reserved for
// and sent upstream: the client's (asked; 0 for none), else the alias's
// default_output_tokens, at most the route's max_output_tokens (0: no
// limit known).
func OutputLimit(p *Policy, r *Route, asked int64) int64 {
	out := r.MaxOutputTokens
	if asked <= 0 && p != nil {
		asked = p.DefaultOutputTokens
	}
	if asked > 0 && (out == 0 || asked < out) {
		out = asked
	}
	return out
}
