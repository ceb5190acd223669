package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Once the drain begins, new requests are refused and probes answered;
// Drain returns when the last request in flight has finished, or false
// when its context ends first.
func TestTheGateRefusesNewRequestsAndWaitsForThoseInFlight(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		w.WriteHeader(200)
	})
	g := NewGate(next, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
	serve := func(method, path string) int {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code
	}
	done := make(chan int)
	go func() { done <- serve("POST", "/slow") }()
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if g.Drain(ctx) {
		t.Fatal("Drain reported drained with a request in flight")
	}
	if st := serve("POST", "/v1/chat/completions"); st != 503 {
		t.Errorf("a new request during the drain: %d, want 503", st)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if st := serve("GET", p); st != 200 {
			t.Errorf("probe %s during the drain: %d, want it answered", p, st)
		}
	}
	if IsProbe(httptest.NewRequest("POST", "/readyz", nil)) {
		t.Error("a POST to /readyz is no probe")
	}
	drained := make(chan bool)
	go func() { drained <- g.Drain(context.Background()) }()
	close(release)
	if st := <-done; st != 200 {
		t.Errorf("the request in flight: %d", st)
	}
	if !<-drained {
		t.Error("Drain did not report drained once the last request finished")
	}
}
