// Package accesslog is the one line every HTTP exchange ends in
// (docs/operations.md, "Logs"): what the handlers learn about the
// exchange, recorded into an Entry its context carries, and written once
// it is answered.
package accesslog

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/logline"
	"github.com/oncegate/oncegate/internal/metrics"
)

// Every HTTP exchange ends in one log line (docs/operations.md, "Logs"):
// what was asked, by whom, how it ended and what it cost — rejected
// requests included. It never holds a key, and holds a request body only
// when log.bodies is set.

// Entry collects what the handlers learn about one exchange.
type Entry struct {
	mu        sync.Mutex
	Tenant    string
	Model     string
	RequestID string
	Code      string // the gateway's error code, if it answered one
	Attempts  int
	Routes    string
	Tokens    int64
	CostUSD   float64
	Terminal  string
	Reason    string
	Body      string // the request body, with log.bodies only
	// TokenCount is where a token count came from: provider, estimate.
	TokenCount string
	// Key is the virtual key the request authenticated with (nil: a
	// tenant's key from the configuration, or none).
	Key *keyring.Key
}

// KeyOf is the virtual key a request authenticated with (nil if none).
func KeyOf(ctx context.Context) *keyring.Key {
	a := Of(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Key
}

type accessKey struct{}

// Of returns the exchange's entry (a throwaway one outside the
// middleware, so callers need not check).
func Of(ctx context.Context) *Entry {
	if a, ok := ctx.Value(accessKey{}).(*Entry); ok {
		return a
	}
	return &Entry{}
}

// Set changes the entry under its lock.
func (a *Entry) Set(f func(a *Entry)) {
	a.mu.Lock()
	f(a)
	a.mu.Unlock()
}

// Writer records the status an exchange was answered with.
type Writer struct {
	http.ResponseWriter
	Status int
	Bytes  int64
	Entry  *Entry
}

// WriteHeader records the first status written.
func (w *Writer) WriteHeader(status int) {
	if w.Status == 0 {
		w.Status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write counts the bytes of the answer.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.Bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (flushes).
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Log writes an exchange's line: INFO for an answer, WARN for a
// refusal (4xx), ERROR for a failure (5xx); DEBUG for health and
// metrics probes.
func (l *Logger) Log(r *http.Request, w *Writer, d time.Duration) {
	status := w.Status
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
	a := w.Entry
	a.mu.Lock()
	defer a.mu.Unlock()
	if status >= 400 && a.Code != "" {
		l.Metrics.ObserveErrorResponse(a.Code, status)
	}
	if !l.Out.Enabled(level) {
		return
	}
	ln := l.Out.Begin(time.Now(), level, "request")
	add := func(k, v string) {
		if v != "" {
			ln.String(k, v)
		}
	}
	add("method", r.Method)
	add("path", r.URL.Path)
	ln.Int("status", int64(status))
	ln.Float("latency_ms", float64(d.Microseconds())/1000)
	add("request_id", cmp.Or(a.RequestID, w.Header().Get("X-Oncegate-Request-Id")))
	add("tenant", a.Tenant)
	if a.Key != nil {
		add("key_id", a.Key.Stored.ID)
	}
	add("model", a.Model)
	add("code", a.Code)
	add("dedup", w.Header().Get("X-Oncegate-Dedup"))
	add("routes", cmp.Or(a.Routes, w.Header().Get("X-Oncegate-Route")))
	if a.Attempts > 0 {
		ln.Int("attempts", int64(a.Attempts))
		ln.Int("tokens", a.Tokens)
		ln.Float("cost_usd", a.CostUSD)
	}
	add("token_count", a.TokenCount)
	add("terminal", a.Terminal)
	add("reason", a.Reason)
	if l.Bodies && a.Body != "" {
		ln.String("body", truncate(a.Body, 4096))
	}
	ln.Write()
}

// RoutesOf lists the routes of a receipt's attempts, in order, once each.
func RoutesOf(routes []string) string {
	var out []string
	for _, r := range routes {
		if len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return strings.Join(out, ",")
}

// NoteCode records the gateway error code the answer carries (api.NoteCode).
func (w *Writer) NoteCode(code string) {
	w.Entry.Set(func(a *Entry) { a.Code = code })
}

// Logger writes the access lines.
type Logger struct {
	// Out receives the lines.
	Out *logline.Writer
	// Metrics counts the error answers by code.
	Metrics *metrics.Metrics
	// Bodies logs request bodies (log.bodies).
	Bodies bool
}

// With returns ctx carrying e: the handlers below record into it.
func With(ctx context.Context, e *Entry) context.Context {
	return context.WithValue(ctx, accessKey{}, e)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
