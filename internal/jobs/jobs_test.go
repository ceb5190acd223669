package jobs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/ledger"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// A job runs again and again until Stop; one with AtStop once more as
// the Runner stops, with a context that has not ended; Stop waits.
func TestTheRunnerRunsEachJobUntilItStops(t *testing.T) {
	t.Parallel()
	r := NewRunner()
	ran := make(chan context.Context, 100)
	final := make(chan context.Context, 1)
	stopping := false
	var mu sync.Mutex
	r.Start(Job{Name: "a", Every: Fixed(time.Millisecond), Run: func(ctx context.Context) {
		select {
		case ran <- ctx:
		default:
		}
	}})
	r.Start(Job{Name: "b", Every: Fixed(time.Hour), AtStop: true, Run: func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if stopping {
			final <- ctx
		}
	}})
	for range 3 {
		if ctx := <-ran; ctx.Err() != nil {
			t.Fatal("a run's context ended while the runner runs")
		}
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	r.Stop()
	r.Stop() // twice is fine
	select {
	case ctx := <-final:
		if ctx.Err() != nil {
			t.Error("the run at stop has an ended context")
		}
	default:
		t.Error("the AtStop job did not run as the runner stopped")
	}
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names %v", got)
	}
}

// fakeLeases is a store whose leases of some ids are lost.
type fakeLeases struct {
	mu    sync.Mutex
	lost  map[string]bool
	err   error
	calls [][]string
	until []time.Time
}

func (f *fakeLeases) Renew(_ context.Context, owner string, ids []string, now, until time.Time) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(ids))
	f.until = append(f.until, until)
	if f.err != nil {
		return nil, f.err
	}
	var lost []string
	for _, id := range ids {
		if f.lost[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

type fakeHeld struct {
	ids  []string
	lost []string
}

func (h *fakeHeld) Each(f func(string)) {
	for _, id := range h.ids {
		f(id)
	}
}
func (h *fakeHeld) Lost(id string) { h.lost = append(h.lost, id) }
func (h *fakeHeld) Forget(id string) {
	h.ids = slices.DeleteFunc(h.ids, func(s string) bool { return s == id })
}

// Renewal extends every held lease by the lease from now and tells the
// holder of each the store would not renew; with nothing held it does
// not ask the store.
func TestRenewalExtendsHeldLeasesAndReportsTheLost(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	store := &fakeLeases{lost: map[string]bool{"b": true}}
	held := &fakeHeld{ids: []string{"a", "b", "c"}}
	j := Renewal(store, c, discard, "gw-1", 30*time.Second, 10*time.Second, held)
	if j.Every() != 10*time.Second || j.AtStop {
		t.Errorf("renewal runs every %s (at stop %v), want every 10s and not at stop", j.Every(), j.AtStop)
	}
	j.Run(context.Background())
	if len(store.calls) != 1 || !slices.Equal(store.calls[0], []string{"a", "b", "c"}) || !store.until[0].Equal(c.Now().Add(30*time.Second)) {
		t.Fatalf("renewed %v until %v", store.calls, store.until)
	}
	if !slices.Equal(held.lost, []string{"b"}) {
		t.Errorf("lost %v, want [b]", held.lost)
	}
	store.err = errors.New("store down")
	j.Run(context.Background())
	if len(held.lost) != 1 {
		t.Errorf("a failed renewal lost %v", held.lost)
	}
	empty := Renewal(store, c, discard, "gw-1", time.Second, time.Second, &fakeHeld{})
	empty.Run(context.Background())
	if len(store.calls) != 2 {
		t.Errorf("renewal with nothing held asked the store")
	}
}

// GiveUp ends the abandoned leases (until just before now) and forgets
// them only once the store took it; it also runs as the gateway stops.
func TestGiveUpEndsAbandonedLeasesOnceTheStoreAnswers(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	store := &fakeLeases{err: errors.New("store down")}
	ab := &fakeHeld{ids: []string{"x", "y"}}
	j := GiveUp(store, c, "gw-1", ab)
	if j.Every() != AbandonedRetry || !j.AtStop {
		t.Errorf("give-up runs every %s (at stop %v)", j.Every(), j.AtStop)
	}
	j.Run(context.Background())
	if len(ab.ids) != 2 {
		t.Fatalf("forgot %v while the store was down", ab.ids)
	}
	store.err = nil
	j.Run(context.Background())
	if len(ab.ids) != 0 || !store.until[1].Before(c.Now()) {
		t.Errorf("left %v; lease until %v, want before now", ab.ids, store.until[1])
	}
}

type fakeState struct {
	mu    sync.Mutex
	saved map[string][]byte
	saves int
}

func (s *fakeState) SaveState(_ context.Context, name string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	s.saved[name] = slices.Clone(v)
	return nil
}

func (s *fakeState) State(_ context.Context, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.saved[name]; ok {
		return v, nil
	}
	return nil, ledger.ErrNotFound
}

type fakeRates struct{ snap, restored []byte }

func (r *fakeRates) Snapshot() []byte { return r.snap }
func (r *fakeRates) Restore(b []byte) { r.restored = b }

// The rates are saved only when they changed, every second and at stop,
// and what was saved is what a restart restores.
func TestRatesAreKeptWhenTheyChangeAndRestored(t *testing.T) {
	t.Parallel()
	st := &fakeState{saved: map[string][]byte{}}
	rk := &fakeRates{}
	RestoreRates(context.Background(), st, rk, discard)
	if rk.restored != nil {
		t.Fatalf("restored %q from an empty store", rk.restored)
	}
	j := SaveRates(st, rk, discard)
	if j.Every() != time.Second || !j.AtStop {
		t.Errorf("rates kept every %s (at stop %v)", j.Every(), j.AtStop)
	}
	j.Run(context.Background()) // nothing yet
	rk.snap = []byte("v1")
	j.Run(context.Background())
	j.Run(context.Background()) // unchanged
	rk.snap = []byte("v2")
	j.Run(context.Background())
	if st.saves != 2 || string(st.saved[RatesState]) != "v2" {
		t.Errorf("%d saves, kept %q; want 2 and v2", st.saves, st.saved[RatesState])
	}
	next := &fakeRates{}
	RestoreRates(context.Background(), st, next, discard)
	if string(next.restored) != "v2" {
		t.Errorf("restored %q", next.restored)
	}
}
