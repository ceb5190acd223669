// Package drain is the gate between the listener and the handlers during
// a graceful stop (docs/operations.md, "Stopping"): it counts the requests
// being served and, once the drain has begun, refuses new ones while the
// health probes keep their answers.
package drain

import (
	"context"
	"net/http"
	"sync"
)

// Gate stands between the listener and the gateway's handlers
// during a graceful stop (docs/operations.md): it counts the requests
// being served, and once the drain has begun it refuses new ones while
// the health probes keep their answers — /healthz 200, /readyz 503
// draining — until the last request in flight has finished. It is safe
// for concurrent use.
type Gate struct {
	next   http.Handler
	refuse http.HandlerFunc
	mu     sync.Mutex
	// active counts the requests being served, probes aside.
	active   int
	draining bool
	// idle is closed when the drain has begun and nothing is active.
	idle chan struct{}
}

// NewGate returns a gate that serves with next and, once the drain has
// begun, answers new requests with refuse.
func NewGate(next http.Handler, refuse http.HandlerFunc) *Gate {
	return &Gate{next: next, refuse: refuse, idle: make(chan struct{})}
}

// IsProbe reports whether a request is a health or metrics probe: those
// are answered through the whole drain. /health/liveliness and
// /health/readiness are /healthz's and /readyz's other names
// (docs/api.md, "Paths").
func IsProbe(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics", "/health/liveliness", "/health/readiness":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return false
}

// ServeHTTP serves r, or refuses it once the drain has begun.
func (d *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if IsProbe(r) {
		d.next.ServeHTTP(w, r)
		return
	}
	if !d.enter() {
		d.refuse(w, r)
		return
	}
	defer d.leave()
	d.next.ServeHTTP(w, r)
}

func (d *Gate) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.active++
	return true
}

func (d *Gate) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active--
	if d.draining && d.active == 0 {
		close(d.idle)
	}
}

// Drain refuses new requests from now on and waits until those being
// served have finished, or ctx ends (false).
func (d *Gate) Drain(ctx context.Context) bool {
	d.mu.Lock()
	if !d.draining {
		d.draining = true
		if d.active == 0 {
			close(d.idle)
		}
	}
	d.mu.Unlock()
	select {
	case <-d.idle:
		return true
	case <-ctx.Done():
		return false
	}
}
