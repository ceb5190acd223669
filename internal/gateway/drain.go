package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/api"
)

// drainGate stands between the listener and the gateway's handlers
// during a graceful stop (docs/operations.md): it counts the requests
// being served, and once the drain has begun it refuses new ones while
// the health probes keep their answers — /healthz 200, /readyz 503
// draining — until the last request in flight has finished. It is safe
// for concurrent use.
type drainGate struct {
	g  *Gateway
	mu sync.Mutex
	// active counts the requests being served, probes aside.
	active   int
	draining bool
	// idle is closed when the drain has begun and nothing is active.
	idle chan struct{}
}

func newDrainGate(g *Gateway) *drainGate {
	return &drainGate{g: g, idle: make(chan struct{})}
}

// isProbe reports whether a request is a health or metrics probe: those
// are answered through the whole drain.
func isProbe(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return false
}

func (d *drainGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isProbe(r) {
		d.g.ServeHTTP(w, r)
		return
	}
	if !d.enter() {
		d.g.refuseDraining(w, r)
		return
	}
	defer d.leave()
	d.g.ServeHTTP(w, r)
}

// refuseDraining answers a request that arrived during the drain, and
// logs it as every exchange is.
func (g *Gateway) refuseDraining(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	lw := &logWriter{ResponseWriter: w, access: &accessLog{}}
	lw.Header().Set("Connection", "close")
	api.Errorf(api.CodeDraining, "this gateway is stopping and takes no new requests; send the request again (a load balancer sends it to another replica)").
		Write(lw, protocolOf(r), api.Meta{})
	g.logAccess(r, lw, time.Since(start))
}

func (d *drainGate) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return false
	}
	d.active++
	return true
}

func (d *drainGate) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active--
	if d.draining && d.active == 0 {
		close(d.idle)
	}
}

// drain refuses new requests from now on and waits until those being
// served have finished, or ctx ends (false).
func (d *drainGate) drain(ctx context.Context) bool {
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
