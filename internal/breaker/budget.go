package breaker

import (
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

// BudgetConfig configures the fleet retry budget (docs/overload.md).
type BudgetConfig struct {
	// Ratio is how many retries are allowed per first attempt.
	Ratio float64
	// MinPerSecond retries are allowed whatever the traffic, so that a
	// quiet gateway can still retry.
	MinPerSecond float64
	// Window is the rolling window both are counted over.
	Window time.Duration
}

// Budget is the fleet retry budget: over a rolling window, retries (every
// attempt after a logical request's first — retries, fallbacks, resumes,
// restarts and hedges) are admitted only while
//
//	retries ≤ ratio × first attempts + min_per_second × window
//
// (Finagle's RetryBudget, Envoy's retry_budget), which bounds the upstream
// load an outage can multiply to about (1 + ratio)×. It is safe for
// concurrent use.
type Budget struct {
	cfg     BudgetConfig
	clock   clock.Clock
	reserve float64 // min_per_second × window
	mu      sync.Mutex
	counts  rolling // first attempts, retries
}

// NewBudget returns an empty budget.
func NewBudget(cfg BudgetConfig, clk clock.Clock) *Budget {
	return &Budget{cfg: cfg, clock: clk, reserve: cfg.MinPerSecond * cfg.Window.Seconds(), counts: newRolling(cfg.Window)}
}

// First counts a logical request's first attempt.
func (b *Budget) First() {
	b.mu.Lock()
	b.counts.add(b.clock.Now(), 0, 1)
	b.mu.Unlock()
}

func (b *Budget) fits(now time.Time) bool {
	firsts, retries := b.counts.sum(now)
	return float64(retries+1) <= b.cfg.Ratio*float64(firsts)+b.reserve
}

// Allows reports, without taking it, whether one more retry fits now.
func (b *Budget) Allows() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fits(b.clock.Now())
}

// Headroom reports the retries taken over the window and how many it
// allows now.
func (b *Budget) Headroom() (taken, allowed float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	firsts, retries := b.counts.sum(b.clock.Now())
	return float64(retries), b.cfg.Ratio*float64(firsts) + b.reserve
}

// Retry takes one retry from the budget; false means it is spent.
func (b *Budget) Retry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if !b.fits(now) {
		return false
	}
	b.counts.add(now, 1, 1)
	return true
}
