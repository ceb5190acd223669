// Package tracing makes the spans of requests and attempts
// (docs/operations.md, "Traces"): a span per logical request, a child per
// attempt, in the caller's trace when it sent a traceparent, and the
// attempt's context sent upstream. With no tracer configured, spans cost
// nothing.
package tracing

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// propagator reads and writes W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// Tracer makes the spans, or none when no tracer was configured.
type Tracer struct {
	t  trace.Tracer
	on bool
}

// New returns a Tracer recording with t; nil records nothing and costs
// nothing on the request path.
func New(t trace.Tracer) Tracer {
	if t == nil {
		return Tracer{t: noop.NewTracerProvider().Tracer("oncegate")}
	}
	return Tracer{t: t, on: true}
}

// Request is what a logical request's span says of it.
type Request struct {
	ID, Tenant, Alias, KeyID string
	Protocol                 provider.Protocol
	Stream                   bool
}

// StartRequest starts a logical request's span, a child of the caller's
// trace context when its headers h carried one. It returns nil without a
// tracer.
func (t Tracer) StartRequest(h http.Header, r Request) (context.Context, trace.Span) {
	if !t.on {
		return nil, nil // no spans, no work on the request path
	}
	ctx := propagator.Extract(context.Background(), propagation.HeaderCarrier(h))
	op := genAIOperation(r.Protocol)
	ctx, span := t.t.Start(ctx, op+" "+r.Alias, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("oncegate.request_id", r.ID), attribute.String("oncegate.tenant", r.Tenant),
			attribute.String("oncegate.operation", r.Protocol.Operation()), attribute.String("gen_ai.operation.name", op),
			attribute.String("gen_ai.request.model", r.Alias), attribute.Bool("oncegate.stream", r.Stream)))
	if r.KeyID != "" {
		span.SetAttributes(attribute.String("oncegate.key_id", r.KeyID)) // docs/keys-and-teams.md
	}
	return ctx, span
}

// EndRequest ends a request's span with its receipt's terminal and totals.
func EndRequest(span trace.Span, r *receipt.Receipt) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("oncegate.terminal", r.Terminal), attribute.String("oncegate.reason", r.Reason),
		attribute.Int("oncegate.attempts", len(r.Attempts)), attribute.Int64("oncegate.billable_tokens", r.Totals.BillableTokens),
		attribute.Float64("oncegate.cost_usd", r.Totals.CostUSD))
	if r.Terminal != string(gw.TerminalSucceeded) {
		span.SetStatus(codes.Error, r.Terminal+": "+r.Reason)
	}
	span.End()
}

// StartAttempt starts attempt n's span under its request's (parent), and
// writes its context into the upstream request's headers hdr. It returns
// nil without a tracer.
func (t Tracer) StartAttempt(parent context.Context, route *policy.Route, n int, purpose string, hdr http.Header) trace.Span {
	if !t.on {
		return nil
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, span := t.t.Start(parent, "attempt "+strconv.Itoa(n)+" "+route.ID, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("oncegate.attempt", n), attribute.String("oncegate.route", route.ID),
			attribute.String("oncegate.purpose", purpose), attribute.String("oncegate.provider", route.Provider.ID),
			attribute.String("gen_ai.system", route.Provider.Type), attribute.String("gen_ai.request.model", route.Model)))
	propagator.Inject(ctx, propagation.HeaderCarrier(hdr))
	return span
}

// EndAttempt ends an attempt's span with what it came to on route (nil:
// no cost).
func EndAttempt(span trace.Span, o *receipt.Observation, route *policy.Route) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("oncegate.outcome_class", string(o.Kind.Class())), attribute.String("oncegate.kind", string(o.Kind)),
		attribute.Int("http.response.status_code", o.HTTPStatus), attribute.Bool("oncegate.visible_output", o.VisibleOutput),
		attribute.Int64("gen_ai.usage.input_tokens", o.Usage.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", o.Usage.OutputTokens))
	if route != nil {
		span.SetAttributes(attribute.Float64("oncegate.cost_usd", route.Price.Cost(o.Usage).USD()))
	}
	if o.Kind != gw.KindOK {
		span.SetStatus(codes.Error, string(o.Kind))
	}
	span.End()
}

// genAIOperation names an operation as the GenAI semantic conventions do.
func genAIOperation(p provider.Protocol) string {
	switch p {
	case provider.Embeddings:
		return "embeddings"
	case provider.Responses:
		return "chat"
	}
	return "chat"
}
