// Package clock injects time into stateful parts (leases, breakers, budgets)
// so that tests control it. Pure functions take a time.Time instead.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// System is the wall clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Fake is a manually advanced clock for tests. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the fake to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Offset is the wall clock moved forward by a manual offset: time passes
// as it really does, so real waits and timers still end, and a test can
// also jump ahead (an open breaker's open_for, a window's end) at once.
// It is safe for concurrent use.
type Offset struct {
	mu  sync.Mutex
	off time.Duration
}

// Now returns the wall clock plus the offset.
func (o *Offset) Now() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return time.Now().Add(o.off)
}

// Advance jumps the clock forward by d.
func (o *Offset) Advance(d time.Duration) {
	o.mu.Lock()
	o.off += d
	o.mu.Unlock()
}

var (
	_ Clock = System{}
	_ Clock = (*Fake)(nil)
	_ Clock = (*Offset)(nil)
)
