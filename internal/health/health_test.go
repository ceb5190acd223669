package health

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type ping struct{ err error }

func (p *ping) Ping(context.Context) error { return p.err }

// /readyz names the first part that does not answer; only a detailed
// caller reads why; each change is logged once.
func TestReadyNamesWhatIsDownAndLogsEachChangeOnce(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	store, coord := &ping{}, &ping{}
	draining := false
	rd := &Ready{Store: store, Coordination: coord, Draining: func() bool { return draining },
		Detailed: func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer admin" },
		Log:      slog.New(slog.NewTextHandler(&logs, nil))}
	ask := func(admin bool) (int, string) {
		r := httptest.NewRequest("GET", "/readyz", nil)
		if admin {
			r.Header.Set("Authorization", "Bearer admin")
		}
		w := httptest.NewRecorder()
		rd.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, c := range []struct {
		name       string
		store, crd error
		drain      bool
		admin      bool
		status     int
		body       string
	}{
		{"all answer", nil, nil, false, false, 200, "ready\n"},
		{"store down, anonymous", errors.New("dial 10.0.0.5: refused"), nil, false, false, 503, "store unavailable\n"},
		{"store down, admin", errors.New("dial 10.0.0.5: refused"), nil, false, true, 503, "store unavailable: dial 10.0.0.5: refused\n"},
		{"coordination down", nil, errors.New("redis: timeout"), false, true, 503, "coordination unavailable: redis: timeout\n"},
		{"draining first", errors.New("x"), nil, true, false, 503, "draining\n"},
		{"back", nil, nil, false, false, 200, "ready\n"},
	} {
		store.err, coord.err, draining = c.store, c.crd, c.drain
		if st, body := ask(c.admin); st != c.status || body != c.body {
			t.Errorf("%s: %d %q, want %d %q", c.name, st, body, c.status, c.body)
		}
	}
	got := logs.String()
	if n := strings.Count(got, "not ready"); n != 3 { // store, coordination, draining
		t.Errorf("%d not-ready lines, want 3:\n%s", n, got)
	}
	if n := strings.Count(got, "ready again"); n != 1 {
		t.Errorf("%d ready-again lines, want 1:\n%s", n, got)
	}
}

// An outage is logged once when it starts and once when it ends.
func TestAnOutageIsLoggedOnceEachWay(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	o := &Outage{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	o.Answered()
	o.Failed(errors.New("a"))
	o.Failed(errors.New("b"))
	o.Answered()
	o.Answered()
	got := logs.String()
	if strings.Count(got, "store unavailable") != 1 || strings.Count(got, "store restored") != 1 {
		t.Errorf("logged:\n%s", got)
	}
}
