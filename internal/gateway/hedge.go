package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/retry"
)

// hedgeRace arbitrates an attempt (slot 0) and its hedge (slot 1) (
// docs/overload.md). The first to reach a decisive outcome — visible output, an answer,
// or a failure that ends the request — wins and cancels the other; a
// retryable failure before output leaves its rival racing. A hedge may be
// decided only while the primary has shown no first byte; both facts are
// settled under one lock, on one clock, so the receipt's times agree with
// what happened. It is safe for concurrent use.
type hedgeRace struct {
	clock     clock.Clock
	mu        sync.Mutex
	hedged    bool
	firstByte bool          // the primary's first byte arrived
	answered  chan struct{} // closed at the primary's first byte
	winner    int           // -1: none yet
	cancel    [2]context.CancelFunc
	done      [2]bool // finished without winning
}

func newHedgeRace(clk clock.Clock, cancelPrimary context.CancelFunc) *hedgeRace {
	return &hedgeRace{clock: clk, winner: -1, answered: make(chan struct{}), cancel: [2]context.CancelFunc{cancelPrimary}}
}

// raceSlot is one attempt's place in a race; a nil slot is an attempt that
// races nobody.
type raceSlot struct {
	race *hedgeRace
	i    int
}

// sawFirstByte records the attempt's first byte and returns when it was
// seen.
func (s *raceSlot) sawFirstByte(fallback time.Time) time.Time {
	if s == nil {
		return fallback
	}
	r := s.race
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.i == 0 && !r.firstByte {
		r.firstByte = true
		close(r.answered)
	}
	return r.clock.Now()
}

// rivals is how many attempts after this one race it: 1 for a hedged
// primary, else 0.
func (s *raceSlot) rivals() int {
	if s == nil || s.i != 0 {
		return 0
	}
	s.race.mu.Lock()
	defer s.race.mu.Unlock()
	if s.race.hedged {
		return 1
	}
	return 0
}

// hedge decides to hedge if the primary still has no first byte and no
// winner, and returns the time of the decision.
func (r *hedgeRace) hedge(cancelHedge context.CancelFunc) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstByte || r.winner >= 0 || r.done[0] || r.hedged {
		return time.Time{}, false
	}
	r.hedged, r.cancel[1] = true, cancelHedge
	return r.clock.Now(), true
}

// unhedge takes back a hedge decided but never dispatched.
func (r *hedgeRace) unhedge() {
	r.mu.Lock()
	r.hedged, r.cancel[1] = false, nil
	r.mu.Unlock()
}

// claim makes the slot's attempt the winner unless its rival won first; it
// reports whether the slot won (a lone attempt always does).
func (s *raceSlot) claim() bool {
	if s == nil {
		return true
	}
	r := s.race
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.winner < 0 {
		r.winner = s.i
		if other := r.cancel[1-s.i]; other != nil && !r.done[1-s.i] {
			other()
		}
	}
	return r.winner == s.i
}

// finish records how the slot's attempt ended and reports whether it lost
// the race: its rival won before it ended. A decisive end claims the race.
func (s *raceSlot) finish(decisive bool) (lost bool) {
	if s == nil {
		return false
	}
	if decisive {
		return !s.claim()
	}
	r := s.race
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.winner >= 0 && r.winner != s.i {
		return true
	}
	r.done[s.i] = true
	return false
}

// decisive reports whether an attempt's observation decides a race.
func decisive(res *attemptResult) bool {
	return retry.Decisive(&retry.Attempt{Kind: res.obs.Kind, Cause: res.obs.Cause, VisibleOutput: res.obs.VisibleOutput})
}

// lose marks an attempt that lost the race: cancelled as hedge_lost, and
// charged for what it consumed — the prompt it sent, and the output it
// generated when the provider counted it.
func (c *call) lose(res *attemptResult) {
	res.obs.Kind, res.obs.Cause, res.obs.VisibleOutput, res.obs.EmittedTokens = gw.KindCancelled, gw.CauseHedgeLost, false, 0
	res.kind, res.upstreamErr = gw.KindCancelled, nil
	if res.obs.Usage.InputTokens == 0 {
		res.obs.Usage.InputTokens, res.obs.UsageEstimated = res.prompt, true
	}
	res.obs.Error = nil
}

// hedgeable reports whether decision d's attempt may be hedged: the alias
// hedges, and nothing visible has gone out (docs/overload.md). The engine has
// the last word on budgets and routes.
func (c *call) hedgeable(d retry.Decision) bool {
	return c.alias.HedgeAfter > 0 && !c.out.started && d.Action != retry.ActionResume && d.Action != retry.ActionRestart
}

// hedged runs attempt n with hedging: if it shows no first byte within
// hedge.after, the engine may dispatch one duplicate to the next route,
// durable before it leaves like any attempt; the two race, and both are
// recorded, charged and observed together.
func (c *call) hedged(d retry.Decision, p *permit, n int) (*attemptResult, retry.Decision, error) {
	pctx, pcancel := context.WithCancel(c.ctx)
	defer pcancel()
	race := newHedgeRace(c.g.clock, pcancel)
	primary := &raceSlot{race: race, i: 0}
	results := make(chan *attemptResult, 2)
	started := c.g.clock.Now()
	go func() { results <- c.raced(pctx, d, n, p, primary, started) }()
	timer := time.NewTimer(c.alias.HedgeAfter)
	defer timer.Stop()
	select {
	case res := <-results:
		return c.single(res, p)
	case <-race.answered:
		return c.single(<-results, p)
	case <-timer.C:
	}
	hctx, hcancel := context.WithCancel(c.ctx)
	defer hcancel()
	at, ok := race.hedge(hcancel)
	var h retry.Decision
	var hp *permit
	if ok {
		adm := c.admission(true)
		if h, ok = c.rec.Hedge(adm, at); ok {
			if hp, ok = c.acquire(h, false, &adm, p.route); !ok {
				c.rec.CancelHedge()
			}
		}
	}
	if ok {
		evs := append(c.dispatchEvents(h, n+1), c.log.event(ledger.EvDecision, at, c.rec.R.Decisions[len(c.rec.R.Decisions)-1]))
		if err := c.log.append(c.ctx, evs...); err != nil {
			c.release(hp, nil)
			pcancel()
			c.release(p, <-results)
			return nil, retry.Decision{}, err
		}
	}
	if !ok {
		race.unhedge()
		return c.single(<-results, p)
	}
	go func() { results <- c.raced(hctx, h, n+1, hp, &raceSlot{race: race, i: 1}, at) }()
	pair := [2]*attemptResult{}
	for range 2 {
		res := <-results
		pair[res.slot] = res
	}
	c.release(p, pair[0])
	c.release(hp, pair[1])
	next, err := c.rec.ObservePair(pair[0].obs, pair[1].obs, h, c.admission(true))
	if err != nil {
		return nil, retry.Decision{}, err
	}
	c.logObserved(2)
	winner := "neither"
	switch race.winner {
	case 0:
		winner = "primary"
	case 1:
		winner = "hedge"
	}
	c.g.metrics.ObserveHedge(winner)
	if race.winner == 1 || (race.winner < 0 && !pair[0].obs.ObservedAt.After(pair[1].obs.ObservedAt)) {
		return pair[1], next, nil
	}
	return pair[0], next, nil
}

// raced runs one attempt of a race and settles its place in it.
func (c *call) raced(ctx context.Context, d retry.Decision, n int, p *permit, slot *raceSlot, started time.Time) *attemptResult {
	res := c.attempt(ctx, d, n, p, slot, started)
	res.slot = slot.i
	if slot.finish(decisive(res)) {
		c.lose(res)
	}
	return res
}
