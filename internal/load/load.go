// Package load keeps what a tier's strategy chooses among its routes by
// (docs/routing.md): each route's attempts in flight, its recent time to
// first token, and its rate-limit headroom — learned from the provider's
// rate-limit headers and counted against the route's own rpm and tpm —
// and until when a long rate-limit hint cooled it down (docs/retries.md). A
// Table holds one process's view; a shared coordination adds the other
// replicas' (SetRemote). Table is safe for concurrent use.
package load

import (
	"net/http"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/retry"
)

// Limits are a route's own rate limits (0: none), and whether a
// strategy chooses by its load (Share): only those routes' figures are
// worth sharing with other replicas.
type Limits struct {
	RPM, TPM int
	Share    bool
}

// Table is the routes' load as this process sees it.
type Table struct {
	clock  clock.Clock
	mu     sync.Mutex
	routes map[string]*route
}

type route struct {
	lim      Limits
	inFlight int
	begun    int64 // attempts dispatched here since the process started
	remote   int   // the other replicas' attempts in flight, as last shared
	ttft     float64
	measured bool
	header   headroom // from the provider's rate-limit headers, here
	shared   headroom // the same, as another replica last saw it
	minute   window   // requests and tokens over the last minute
	// cool is until when a provider's long rate-limit hint cooled the
	// route down, as learned here; coolShared as another replica shared
	// it (docs/retries.md).
	cool, coolShared time.Time
}

// headroom is a share of rate limit left, until the limit resets.
type headroom struct {
	left  float64
	until time.Time
}

func (h headroom) at(now time.Time) float64 {
	if h.until.IsZero() || !now.Before(h.until) {
		return 1 // reset, or never learned
	}
	return h.left
}

// ttftWeight is how much a new time to first token moves a route's
// estimate: recent measurements count, one slow answer does not decide.
const ttftWeight = 0.3

// New returns a table for routes with their own limits.
func New(clk clock.Clock, limits map[string]Limits) *Table {
	t := &Table{clock: clk, routes: map[string]*route{}}
	t.SetLimits(limits)
	return t
}

// SetLimits replaces the routes' own limits (a reload); what was
// measured is kept.
func (t *Table) SetLimits(limits map[string]Limits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, l := range limits {
		t.get(id).lim = l
	}
}

// get returns route id's entry; t.mu is held.
func (t *Table) get(id string) *route {
	r := t.routes[id]
	if r == nil {
		r = &route{}
		t.routes[id] = r
	}
	return r
}

// Begin counts an attempt dispatched on route; End when it ended.
func (t *Table) Begin(id string) {
	t.mu.Lock()
	r := t.get(id)
	r.inFlight++
	r.begun++
	r.minute.add(t.clock.Now(), 1, 0)
	t.mu.Unlock()
}

// End counts an attempt on route that ended, with the tokens it used.
func (t *Table) End(id string, tokens int64) {
	t.mu.Lock()
	r := t.get(id)
	r.inFlight = max(0, r.inFlight-1)
	r.minute.add(t.clock.Now(), 0, tokens)
	t.mu.Unlock()
}

// TTFT records an attempt's time to first token on route.
func (t *Table) TTFT(id string, d time.Duration) {
	t.mu.Lock()
	r := t.get(id)
	if !r.measured {
		r.ttft, r.measured = float64(d), true
	} else {
		r.ttft += ttftWeight * (float64(d) - r.ttft)
	}
	t.mu.Unlock()
}

// Headers learns route's rate-limit headroom from a provider's response
// headers (ParseHeaders); it reports what it learned, for sharing.
func (t *Table) Headers(id string, h http.Header) (left float64, until time.Time, ok bool) {
	now := t.clock.Now()
	left, until, ok = ParseHeaders(h, now)
	if !ok {
		return 0, time.Time{}, false
	}
	t.mu.Lock()
	t.get(id).header = headroom{left: left, until: until}
	t.mu.Unlock()
	return left, until, true
}

// SetRemote sets what the other replicas share of route: their attempts
// in flight and the headroom one of them last learned.
func (t *Table) SetRemote(id string, inFlight int, left float64, until time.Time) {
	t.mu.Lock()
	r := t.get(id)
	r.remote = inFlight
	if until.After(r.shared.until) || until.IsZero() {
		r.shared = headroom{left: left, until: until}
	}
	t.mu.Unlock()
}

// Learned is the headroom route's provider headers last gave here, and
// until when it holds (zero: none), for sharing with other replicas.
func (t *Table) Learned(id string) (left float64, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.get(id).header
	return h.left, h.until
}

// Shared lists the routes whose load a strategy chooses by (Limits.Share).
func (t *Table) Shared() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []string
	for id, r := range t.routes {
		if r.lim.Share {
			ids = append(ids, id)
		}
	}
	return ids
}

// InFlights calls f with every route's attempts in flight in this
// process.
func (t *Table) InFlights(f func(route string, inFlight int)) {
	t.mu.Lock()
	counts := make(map[string]int, len(t.routes))
	for id, r := range t.routes {
		counts[id] = r.inFlight
	}
	t.mu.Unlock()
	for id, n := range counts {
		f(id, n)
	}
}

// Dispatched is how many attempts this process dispatched on route since
// it started.
func (t *Table) Dispatched(id string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(id).begun
}

// InFlight is this process's attempts in flight on route.
func (t *Table) InFlight(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(id).inFlight
}

// Figures is route's figures for the engine: attempts in flight across
// the fleet, recent time to first token (whole milliseconds, so that a
// receipt replays it exactly), and headroom — the least of what the
// provider's headers and the route's own limits leave.
func (t *Table) Figures(id string) retry.Figures {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.get(id)
	f := retry.Figures{InFlight: r.inFlight + r.remote, Headroom: min(r.header.at(now), r.shared.at(now))}
	if r.measured {
		f.TTFT = time.Duration(r.ttft).Round(time.Millisecond)
	}
	reqs, toks := r.minute.sum(now)
	if r.lim.RPM > 0 {
		f.Headroom = min(f.Headroom, max(0, 1-float64(reqs)/float64(r.lim.RPM)))
	}
	if r.lim.TPM > 0 {
		f.Headroom = min(f.Headroom, max(0, 1-float64(toks)/float64(r.lim.TPM)))
	}
	return f
}

// Cool cools route down until until (a rate-limited attempt's long
// hint, retry.CoolsUntil); a later cooling wins.
func (t *Table) Cool(id string, until time.Time) {
	t.mu.Lock()
	if r := t.get(id); until.After(r.cool) {
		r.cool = until
	}
	t.mu.Unlock()
}

// SetRemoteCool sets until when another replica found route cooling; a
// later cooling wins.
func (t *Table) SetRemoteCool(id string, until time.Time) {
	t.mu.Lock()
	if r := t.get(id); until.After(r.coolShared) {
		r.coolShared = until
	}
	t.mu.Unlock()
}

// Cooled is until when route cools as learned here (zero: never), for
// sharing with other replicas.
func (t *Table) Cooled(id string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(id).cool
}

// Cooling is the routes that cool now, fleet-wide, and until when: the
// engine's Admission.Cooling. nil when none does.
func (t *Table) Cooling(ids []string) map[string]time.Time {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[string]time.Time
	for _, id := range ids {
		r := t.routes[id]
		if r == nil {
			continue
		}
		if until := later(r.cool, r.coolShared); until.After(now) {
			if out == nil {
				out = map[string]time.Time{}
			}
			out[id] = until
		}
	}
	return out
}

// Routes lists every route the table knows.
func (t *Table) Routes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.routes))
	for id := range t.routes {
		ids = append(ids, id)
	}
	return ids
}

// window counts requests and tokens over the last minute, a second a
// slot.
type window struct {
	slots [60]struct {
		sec        int64
		reqs, toks int64
	}
}

func (w *window) add(now time.Time, reqs, toks int64) {
	sec := now.Unix()
	s := &w.slots[sec%60]
	if s.sec != sec {
		s.sec, s.reqs, s.toks = sec, 0, 0
	}
	s.reqs += reqs
	s.toks += toks
}

func (w *window) sum(now time.Time) (reqs, toks int64) {
	sec := now.Unix()
	for _, s := range w.slots {
		if s.sec > sec-60 && s.sec <= sec {
			reqs += s.reqs
			toks += s.toks
		}
	}
	return reqs, toks
}
