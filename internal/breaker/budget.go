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

// Budget is the retry budget, kept per provider (docs/overload.md): over a
// rolling window, a provider's retries — attempts of a logical request on
// a provider that already had one of its attempts — are admitted only
// while
//
//	retries ≤ ratio × first attempts + min_per_second × window
//
// (Finagle's RetryBudget, Envoy's retry_budget), which bounds the load an
// outage can multiply on that provider to about (1 + ratio)×. A request's
// first attempt on another provider (a fallback) is a first attempt
// there: it adds no load to the failing one. It is safe for concurrent
// use.
type Budget struct {
	cfg     BudgetConfig
	clock   clock.Clock
	reserve float64 // min_per_second × window
	mu      sync.Mutex
	counts  map[string]*rolling // by provider: first attempts, retries
}

// NewBudget returns an empty budget.
func NewBudget(cfg BudgetConfig, clk clock.Clock) *Budget {
	return &Budget{cfg: cfg, clock: clk, reserve: cfg.MinPerSecond * cfg.Window.Seconds(), counts: map[string]*rolling{}}
}

func (b *Budget) of(provider string) *rolling {
	r := b.counts[provider]
	if r == nil {
		n := newRolling(b.cfg.Window)
		r = &n
		b.counts[provider] = r
	}
	return r
}

// First counts a logical request's first attempt on provider.
func (b *Budget) First(provider string) {
	b.mu.Lock()
	b.of(provider).add(b.clock.Now(), 0, 1)
	b.mu.Unlock()
}

func (b *Budget) fits(provider string, now time.Time) bool {
	firsts, retries := b.of(provider).sum(now)
	return float64(retries+1) <= b.cfg.Ratio*float64(firsts)+b.reserve
}

// Allows reports, without taking it, whether one more retry on provider
// fits now.
func (b *Budget) Allows(provider string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fits(provider, b.clock.Now())
}

// Headroom reports, over every provider, the retries taken over the
// window and how many the budgets allow now.
func (b *Budget) Headroom() (taken, allowed float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for _, r := range b.counts {
		firsts, retries := r.sum(now)
		taken += float64(retries)
		allowed += b.cfg.Ratio*float64(firsts) + b.reserve
	}
	return taken, allowed
}

// Retry takes one retry on provider from its budget; false means it is
// spent.
func (b *Budget) Retry(provider string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if !b.fits(provider, now) {
		return false
	}
	b.of(provider).add(now, 1, 1)
	return true
}
