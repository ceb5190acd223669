package breaker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
)

func TestBudgetAdmitsRatioPlusReserve(t *testing.T) {
	clk := clock.NewFake(t0)
	b := NewBudget(BudgetConfig{Ratio: 0.1, MinPerSecond: 1, Window: 10 * time.Second}, clk)
	for range 1000 {
		b.First("p")
	}
	n := 0
	for b.Retry("p") {
		n++
	}
	if n != 110 { // 0.1 × 1000 + 1/s × 10 s
		t.Fatalf("admitted %d retries, want 110", n)
	}
	if b.Allows("p") {
		t.Fatal("spent budget allows")
	}
	clk.Advance(11 * time.Second) // everything aged out: only the reserve
	n = 0
	for b.Retry("p") {
		n++
	}
	if n != 10 {
		t.Fatalf("after the window: %d retries, want the reserve of 10", n)
	}
}

func TestBudgetZeroReserveNeedsTraffic(t *testing.T) {
	b := NewBudget(BudgetConfig{Ratio: 0.5, Window: time.Second}, clock.NewFake(t0))
	if b.Retry("p") {
		t.Fatal("a retry with no first attempts and no reserve")
	}
	b.First("p")
	b.First("p")
	if !b.Retry("p") || b.Retry("p") {
		t.Fatal("want exactly one retry for two first attempts at ratio 0.5")
	}
}

// Under any concurrency the budget never admits more than its bound.
func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(BudgetConfig{Ratio: 0.2, MinPerSecond: 5, Window: time.Minute}, clock.NewFake(t0))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.First("p")
				for range 3 {
					if b.Retry("p") {
						admitted.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got, bound := admitted.Load(), int64(0.2*6400+5*60); got > bound {
		t.Fatalf("%d retries admitted over the bound %d", got, bound)
	}
}

func BenchmarkBudgetRetry(b *testing.B) {
	bu := NewBudget(BudgetConfig{Ratio: 0.1, MinPerSecond: 10, Window: 10 * time.Second}, clock.System{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bu.First("p")
			_ = bu.Allows("p")
		}
	})
}

// Each provider has its own budget: retries spent on a failing provider
// leave another's untouched, and first attempts on one (fallbacks there)
// buy no retries on the other.
func TestBudgetIsPerProvider(t *testing.T) {
	b := NewBudget(BudgetConfig{Ratio: 0.5, Window: time.Second}, clock.NewFake(t0))
	for range 4 {
		b.First("failing")
		b.First("healthy")
	}
	n := 0
	for b.Retry("failing") {
		n++
	}
	if n != 2 {
		t.Fatalf("%d retries on the failing provider, want 2", n)
	}
	if !b.Allows("healthy") {
		t.Fatal("the failing provider's retries spent the healthy one's budget")
	}
	for range 100 {
		b.First("healthy")
	}
	if b.Allows("failing") {
		t.Fatal("first attempts on another provider bought retries on the failing one")
	}
}
