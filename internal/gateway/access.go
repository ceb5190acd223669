package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/keyring"
)

// Every HTTP exchange ends in one log line (docs/operations.md, "Logs"):
// what was asked, by whom, how it ended and what it cost — rejected
// requests included. It never holds a key, and holds a request body only
// when log.bodies is set.

// accessLog collects what the handlers learn about one exchange.
type accessLog struct {
	mu        sync.Mutex
	tenant    string
	model     string
	requestID string
	code      string // the gateway's error code, if it answered one
	attempts  int
	routes    string
	tokens    int64
	costUSD   float64
	terminal  string
	reason    string
	body      string // the request body, with log.bodies only
	// tokenCount is where a token count came from: provider, estimate.
	tokenCount string
	// vkey is the virtual key the request authenticated with (nil: a
	// tenant's key from the configuration, or none).
	vkey *keyring.Key
}

// keyOf is the virtual key a request authenticated with (nil if none).
func keyOf(ctx context.Context) *keyring.Key {
	a := accessOf(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vkey
}

type accessKey struct{}

// accessOf returns the exchange's access log (a throwaway one outside the
// middleware, so callers need not check).
func accessOf(ctx context.Context) *accessLog {
	if a, ok := ctx.Value(accessKey{}).(*accessLog); ok {
		return a
	}
	return &accessLog{}
}

func (a *accessLog) set(f func(a *accessLog)) {
	a.mu.Lock()
	f(a)
	a.mu.Unlock()
}

// logWriter records the status an exchange was answered with.
type logWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	access *accessLog
}

func (w *logWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *logWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (flushes).
func (w *logWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP serves one exchange and logs it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	a := &accessLog{}
	lw := &logWriter{ResponseWriter: w, access: a}
	r = r.WithContext(context.WithValue(r.Context(), accessKey{}, a))
	if g.screen(lw, r) {
		g.mux.ServeHTTP(lw, r)
	}
	d := time.Since(start)
	if lw.status != 0 && lw.Header().Get("Content-Length") != "" {
		// The answer is whole: send it before the line is logged, which
		// wakes the log's writer — a lone client would wait for that
		// wake-up otherwise (docs/performance.md). An answer of unknown
		// length is left for net/http to finish, as it must.
		_ = http.NewResponseController(w).Flush()
	}
	g.logAccess(r, lw, d)
}

// logAccess writes an exchange's line: INFO for an answer, WARN for a
// refusal (4xx), ERROR for a failure (5xx); DEBUG for health and
// metrics probes.
func (g *Gateway) logAccess(r *http.Request, w *logWriter, d time.Duration) {
	status := w.status
	if status == 0 {
		status = 499 // the client left before any answer
	}
	level := slog.LevelInfo
	switch {
	case r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics":
		level = slog.LevelDebug
	case status >= 500:
		level = slog.LevelError
	case status >= 400:
		level = slog.LevelWarn
	}
	a := w.access
	a.mu.Lock()
	defer a.mu.Unlock()
	if status >= 400 && a.code != "" {
		g.metrics.ObserveErrorResponse(a.code, status)
	}
	if !g.access.Enabled(level) {
		return
	}
	l := g.access.Begin(time.Now(), level, "request")
	add := func(k, v string) {
		if v != "" {
			l.String(k, v)
		}
	}
	add("method", r.Method)
	add("path", r.URL.Path)
	l.Int("status", int64(status))
	l.Float("latency_ms", float64(d.Microseconds())/1000)
	add("request_id", firstNonEmpty(a.requestID, w.Header().Get("X-Oncegate-Request-Id")))
	add("tenant", a.tenant)
	if a.vkey != nil {
		add("key_id", a.vkey.Stored.ID)
	}
	add("model", a.model)
	add("code", a.code)
	add("dedup", w.Header().Get("X-Oncegate-Dedup"))
	add("routes", firstNonEmpty(a.routes, w.Header().Get("X-Oncegate-Route")))
	if a.attempts > 0 {
		l.Int("attempts", int64(a.attempts))
		l.Int("tokens", a.tokens)
		l.Float("cost_usd", a.costUSD)
	}
	add("token_count", a.tokenCount)
	add("terminal", a.terminal)
	add("reason", a.reason)
	if g.cur.Load().logBodies && a.body != "" {
		l.String("body", truncate(a.body, 4096))
	}
	l.Write()
}

// routesOf lists the routes of a receipt's attempts, in order, once each.
func routesOf(routes []string) string {
	var out []string
	for _, r := range routes {
		if len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return strings.Join(out, ",")
}

// api.NoteCode records the gateway error code the answer carries (api.NoteCode).
func (w *logWriter) NoteCode(code string) {
	w.access.set(func(a *accessLog) { a.code = code })
}
