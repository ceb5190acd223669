// Package health says whether the gateway takes requests: /readyz
// (docs/operations.md, "Health and readiness") and the log lines of a
// store's outages. It knows the parts it asks only as things that answer
// a ping.
package health

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
)

// Pinger is a part whose availability /readyz reports.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Ready answers /readyz: 200 while the store and the coordination answer
// and no drain has begun, else 503 naming which. Why a part does not
// answer (its address, user, the driver's error) is for the operator:
// only a request with the admin key reads it (Detailed), and the log says
// it once per change.
type Ready struct {
	// Store is the ledger; Coordination the shared coordination (nil:
	// nothing shared).
	Store, Coordination Pinger
	// Draining reports whether the drain has begun.
	Draining func() bool
	// Detailed reports whether a request may read why a part does not
	// answer (it carries the admin key).
	Detailed func(r *http.Request) bool
	// Log receives each change of the answer.
	Log *slog.Logger

	mu   sync.Mutex
	last string
}

// ServeHTTP answers /readyz.
func (rd *Ready) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, detail := rd.Status(r.Context())
	rd.note(status, detail)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if status == "ready" {
		_, _ = w.Write([]byte("ready\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	if detail != "" && rd.Detailed(r) {
		status += ": " + detail
	}
	_, _ = w.Write([]byte(status + "\n"))
}

// Status says whether the gateway takes requests ("ready") or why not,
// and the detail behind a part that does not answer.
func (rd *Ready) Status(ctx context.Context) (status, detail string) {
	if rd.Draining() {
		return "draining", "finishing the requests in flight, taking no new ones"
	}
	if err := rd.Store.Ping(ctx); err != nil {
		return "store unavailable", err.Error()
	}
	if rd.Coordination != nil {
		if err := rd.Coordination.Ping(ctx); err != nil {
			return "coordination unavailable", err.Error()
		}
	}
	return "ready", ""
}

// note logs each change of readiness once, with its detail, so that what
// /readyz keeps from anonymous callers is in the log.
func (rd *Ready) note(status, detail string) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if status == rd.last || (rd.last == "" && status == "ready") {
		return
	}
	rd.last = status
	if status == "ready" {
		rd.Log.Info("ready again")
		return
	}
	rd.Log.Warn("not ready", "status", status, "detail", detail)
}

// Outage logs the store's outages once each: when the first request fails
// for it and when one succeeds again.
type Outage struct {
	// Log receives the two lines.
	Log  *slog.Logger
	mu   sync.Mutex
	down bool
}

// Failed records that a request failed because the store did not answer.
func (o *Outage) Failed(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		o.down = true
		o.Log.Error("store unavailable: new requests are refused with 503 store_unavailable until it answers", "err", err)
	}
}

// Answered records that the store answered a request.
func (o *Outage) Answered() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down {
		o.down = false
		o.Log.Info("store restored: it answers again")
	}
}
