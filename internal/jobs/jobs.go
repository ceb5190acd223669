// Package jobs runs the gateway's background work (docs/architecture.md,
// "Background jobs"): each job is named, runs on its own schedule, and
// has one owner — a Runner — that starts it and, when the gateway stops,
// stops it and waits for it. The jobs themselves (lease renewal, giving
// up abandoned leases, keeping the tenants' rates, retention) are built
// here from the narrow parts of the store they touch, so each is tested
// alone; recovery of lapsed requests is the gateway's, run by the same
// Runner.
package jobs

import (
	"context"
	"sync"
	"time"
)

// Job is one piece of background work.
type Job struct {
	// Name names the job (in logs and tests).
	Name string
	// Every is how long to wait before each run; it is asked again after
	// every run, so a reloaded configuration applies at the next one.
	Every func() time.Duration
	// Run does one run. Its context ends when the Runner stops: a long
	// run stops between its steps.
	Run func(ctx context.Context)
	// AtStop runs the job once more as the Runner stops (with a context
	// that has not ended): to keep what it keeps up to that moment.
	AtStop bool
}

// Fixed is an Every of d.
func Fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// Runner owns the jobs it starts. The zero Runner is not ready: use
// NewRunner.
type Runner struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	mu     sync.Mutex
	names  []string
}

// NewRunner returns a Runner with no jobs.
func NewRunner() *Runner {
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{ctx: ctx, cancel: cancel}
}

// Start runs j in the background until Stop: after j.Every(), then again
// each j.Every() after the run before ended.
func (r *Runner) Start(j Job) {
	r.mu.Lock()
	r.names = append(r.names, j.Name)
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(j.Every())
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				if j.AtStop {
					j.Run(context.Background())
				}
				return
			case <-t.C:
			}
			j.Run(r.ctx)
			t.Reset(j.Every())
		}
	}()
}

// Names lists the jobs started, in order.
func (r *Runner) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

// Stop ends every job — those with AtStop after one last run — and waits
// for them. It may be called more than once.
func (r *Runner) Stop() {
	r.once.Do(r.cancel)
	r.wg.Wait()
}
