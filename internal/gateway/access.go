package gateway

import (
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/httpfront"
)

// ServeHTTP serves one exchange and logs it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	a := &accesslog.Entry{}
	lw := &accesslog.Writer{ResponseWriter: w, Entry: a}
	r = httpfront.Canonical(r.WithContext(accesslog.With(r.Context(), a)), g.mux)
	if lim := g.policy().Limits; httpfront.Screen(lw, r, lim.MaxBodyBytes, lim.BodyReadTimeout.D()) {
		g.mux.ServeHTTP(lw, r)
	}
	d := time.Since(start)
	if lw.Status != 0 && lw.Header().Get("Content-Length") != "" {
		// The answer is whole: send it before the line is logged, which
		// wakes the log's writer — a lone client would wait for that
		// wake-up otherwise (docs/performance.md). An answer of unknown
		// length is left for net/http to finish, as it must.
		_ = http.NewResponseController(w).Flush()
	}
	g.logAccess(r, lw, d)
}

// logAccess writes an exchange's access line (accesslog.Logger).
func (g *Gateway) logAccess(r *http.Request, w *accesslog.Writer, d time.Duration) {
	l := accesslog.Logger{Out: g.access, Metrics: g.metrics, Bodies: g.cur.Load().logBodies}
	l.Log(r, w, d)
}
