package gateway

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncegate/oncegate/internal/mock"
)

// A logical request is one span, in the caller's trace; each attempt a
// child, whose context goes upstream in traceparent.
func TestTracesFollowTheLogicalRequest(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	o := envOptions{mock: mock.Config{Tokens: 4}}
	o.tracer = tp.Tracer("test")
	inBubble(t, o, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}))
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		res, b := e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{
			"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
		id := res.Header.Get("X-Oncegate-Request-Id")
		e.receipt(id)
		// The request's span ends once its call has finished, which may
		// be just after the client read its answer: wait for the call.
		synctest.Wait()
		var request sdktrace.ReadOnlySpan
		var attempts []sdktrace.ReadOnlySpan
		for _, s := range spans.GetSpans().Snapshots() {
			switch {
			case strings.HasPrefix(s.Name(), "chat "):
				request = s
			case strings.HasPrefix(s.Name(), "attempt "):
				attempts = append(attempts, s)
			}
		}
		if request == nil || request.SpanContext().TraceID().String() != traceID {
			t.Fatalf("the request's span is not in the caller's trace: %+v", request)
		}
		if len(attempts) != 2 {
			t.Fatalf("%d attempt spans, want 2", len(attempts))
		}
		for _, a := range attempts {
			if a.Parent().SpanID() != request.SpanContext().SpanID() {
				t.Fatalf("attempt %s is not the request's child", a.Name())
			}
		}
		attrs := map[string]string{}
		for _, kv := range request.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["oncegate.request_id"] != id || attrs["oncegate.attempts"] != "2" || attrs["oncegate.terminal"] != "succeeded" ||
			attrs["gen_ai.request.model"] != "chat" {
			t.Fatalf("request span attributes: %v", attrs)
		}
		if tp := e.primary.Traceparent(id); !strings.Contains(tp, traceID) {
			t.Fatalf("the upstream call carried traceparent %q", tp)
		}
	})
}
