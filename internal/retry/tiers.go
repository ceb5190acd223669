package retry

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Strategy is how a tier of several routes shares load (docs/routing.md).
type Strategy string

// The strategies. A tier of one route has nothing to choose.
const (
	// StrategyOrdered: the first route of the tier by priority.
	StrategyOrdered Strategy = "ordered"
	// StrategyWeighted: a draw weighted by each route's Weight.
	StrategyWeighted Strategy = "weighted"
	// StrategyLeastBusy: the route with the fewest attempts in flight.
	StrategyLeastBusy Strategy = "least_busy"
	// StrategyLatency: the route with the lowest recent time to first
	// token, exploring another now and then.
	StrategyLatency Strategy = "latency"
	// StrategyQuota: the route with the most rate-limit headroom.
	StrategyQuota Strategy = "quota"
)

// Figures are what a strategy chooses among a tier's routes by, as the
// fleet saw them when the decision was taken. The caller supplies them
// (Admission.Figures) and the receipt records them, so that a decision
// replays.
type Figures struct {
	// InFlight is how many attempts the route has in flight, fleet-wide.
	InFlight int
	// TTFT is the route's recent time to first token; 0: none measured.
	TTFT time.Duration
	// Headroom is the share of the route's rate limits left, from 0
	// (spent) to 1 (untouched, or no limit known).
	Headroom float64
}

// explore is the share of latency-strategy choices that try a route at
// random, so that a route that was slow is measured again and can win its
// traffic back.
const explore = 0.1

// choose picks one of cands — routes of one tier that may take the next
// attempt, in priority order — by the policy's strategy. ordinal seeds
// the draws (weighted, ties, exploration), so a choice replays.
func choose(p *Policy, req *Request, cands []*Route, adm Admission, ordinal int) *Route {
	if len(cands) == 1 || p.Strategy == "" || p.Strategy == StrategyOrdered {
		return cands[0]
	}
	u := draw(p.Digest, req.ID, ordinal)
	fig := func(r *Route) Figures {
		f, ok := adm.Figures[r.ID]
		if !ok {
			return Figures{Headroom: 1}
		}
		return f
	}
	switch p.Strategy {
	case StrategyWeighted:
		return weighted(cands, u)
	case StrategyLeastBusy:
		return best(cands, u, func(r *Route) float64 { return -float64(fig(r).InFlight) })
	case StrategyLatency:
		if u < explore {
			return cands[int(u/explore*float64(len(cands)))%len(cands)]
		}
		return best(cands, (u-explore)/(1-explore), func(r *Route) float64 { return -float64(fig(r).TTFT) })
	case StrategyQuota:
		var left []*Route
		for _, r := range cands {
			if fig(r).Headroom > 0 {
				left = append(left, r)
			}
		}
		if len(left) == 0 {
			left = cands // all spent: the provider's 429 will say when
		}
		return best(left, u, func(r *Route) float64 { return fig(r).Headroom })
	}
	return cands[0]
}

// weighted picks by cumulative weight, u in [0, 1).
func weighted(cands []*Route, u float64) *Route {
	total := 0
	for _, r := range cands {
		total += max(1, r.Weight)
	}
	at := u * float64(total)
	for _, r := range cands {
		at -= float64(max(1, r.Weight))
		if at < 0 {
			return r
		}
	}
	return cands[len(cands)-1]
}

// best picks the candidate with the highest score; among equals, one
// drawn by weight with u in [0, 1).
func best(cands []*Route, u float64, score func(*Route) float64) *Route {
	var top []*Route
	var hi float64
	for _, r := range cands {
		switch s := score(r); {
		case len(top) == 0 || s > hi:
			top, hi = []*Route{r}, s
		case s == hi:
			top = append(top, r)
		}
	}
	return weighted(top, u)
}

// draw is a number in [0, 1) from a PRNG seeded by SHA-256(policy digest
// ‖ request id ‖ ordinal ‖ "route"): the same request replays to the same
// choices, and different requests spread.
func draw(policyDigest, requestID string, ordinal int) float64 {
	h := sha256.New()
	h.Write([]byte(policyDigest))
	h.Write([]byte{0})
	h.Write([]byte(requestID))
	var ord [8]byte
	binary.BigEndian.PutUint64(ord[:], uint64(ordinal))
	h.Write(ord[:])
	h.Write([]byte("route"))
	sum := h.Sum(nil)
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// tierOf is route r's tier: its Tier in a tiered policy, else its place
// in priority order (every route a tier of its own).
func (p *Policy) tierOf(r *Route) int {
	if p.Tiered {
		return r.Tier
	}
	return p.index(r.ID)
}

// tierCount is how many tiers the policy's routes form.
func tierCount(p *Policy) int {
	n := 0
	for i := range p.Routes {
		n = max(n, p.tierOf(&p.Routes[i])+1)
	}
	return n
}

// inTier lists, in priority order, the routes of tier t that keep says
// may take the next attempt.
func inTier(p *Policy, t int, keep func(*Route) bool) []*Route {
	var out []*Route
	for i := range p.Routes {
		if r := &p.Routes[i]; p.tierOf(r) == t && keep(r) {
			out = append(out, r)
		}
	}
	return out
}
