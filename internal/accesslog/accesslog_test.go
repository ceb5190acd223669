package accesslog

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/logline"
	"github.com/oncegate/oncegate/internal/metrics"
)

// What handlers record into the context's entry, and the code a refusal
// notes through api.NoteCode, end in the exchange's one line, at the
// level its status gives; a probe's line is DEBUG.
func TestAnExchangeEndsInOneLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	lw := logline.New(&out, "text", slog.LevelDebug)
	e := &Entry{}
	ctx := With(context.Background(), e)
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil).WithContext(ctx)
	w := &Writer{ResponseWriter: httptest.NewRecorder(), Entry: e}
	Of(r.Context()).Set(func(a *Entry) { a.Tenant, a.Model, a.RequestID = "acme", "chat", "req-1" })
	api.NoteCode(w, api.CodeTenantRateLimited)
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("{}"))
	l := Logger{Out: lw, Metrics: metrics.New(nil)}
	l.Log(r, w, 1500*time.Microsecond)
	line := out.String()
	for _, want := range []string{"level=WARN", "status=429", "tenant=acme", "model=chat", "request_id=req-1", "code=tenant_rate_limited", "latency_ms=1.5"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %s: %s", want, line)
		}
	}
	if w.Bytes != 2 || KeyOf(ctx) != nil || Of(context.Background()) == e {
		t.Errorf("bytes %d, key %v", w.Bytes, KeyOf(ctx))
	}
	if got := RoutesOf([]string{"a", "a", "b", "a"}); got != "a,b,a" {
		t.Errorf("routes %q", got)
	}
}
