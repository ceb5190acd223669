package gateway

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
)

// Traces (docs/operations.md, "Traces"): a span per logical request, a
// child per attempt, in the caller's trace when it sent a traceparent,
// and the attempt's context sent upstream. With no tracer configured,
// spans cost nothing.

// propagator reads and writes W3C trace context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// tracerOr returns t, or a tracer that records nothing.
func tracerOr(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("oncegate")
	}
	return t
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

// startRequestSpan starts a logical request's span, a child of the
// caller's trace context when the request carried one.
func (c *call) startRequestSpan(h http.Header) {
	if !c.g.tracing {
		return // no spans, no work on the request path
	}
	ctx := propagator.Extract(context.Background(), propagation.HeaderCarrier(h))
	op := genAIOperation(c.proto)
	ctx, span := c.g.tracer.Start(ctx, op+" "+c.alias.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("oncegate.request_id", c.id), attribute.String("oncegate.tenant", c.tenant.ID),
			attribute.String("oncegate.operation", c.proto.Operation()), attribute.String("gen_ai.operation.name", op),
			attribute.String("gen_ai.request.model", c.alias.Name), attribute.Bool("oncegate.stream", c.stream)))
	if id := c.rec.R.KeyID; id != "" {
		span.SetAttributes(attribute.String("oncegate.key_id", id)) // docs/keys.md
	}
	c.spanCtx, c.span = ctx, span
}

// endRequestSpan ends the request's span with its terminal and totals.
func (c *call) endRequestSpan() {
	if c.span == nil {
		return
	}
	r := c.rec.R
	c.span.SetAttributes(attribute.String("oncegate.terminal", r.Terminal), attribute.String("oncegate.reason", r.Reason),
		attribute.Int("oncegate.attempts", len(r.Attempts)), attribute.Int64("oncegate.billable_tokens", r.Totals.BillableTokens),
		attribute.Float64("oncegate.cost_usd", r.Totals.CostUSD))
	if r.Terminal != string(gw.TerminalSucceeded) {
		c.span.SetStatus(codes.Error, r.Terminal+": "+r.Reason)
	}
	c.span.End()
}

// startAttemptSpan starts attempt n's span under the request's, and
// writes its context into the upstream request's headers.
func (c *call) startAttemptSpan(route *policy.Route, n int, purpose string, hdr http.Header) trace.Span {
	if !c.g.tracing {
		return nil
	}
	parent := c.spanCtx
	if parent == nil {
		parent = context.Background()
	}
	ctx, span := c.g.tracer.Start(parent, "attempt "+strconv.Itoa(n)+" "+route.ID, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("oncegate.attempt", n), attribute.String("oncegate.route", route.ID),
			attribute.String("oncegate.purpose", purpose), attribute.String("oncegate.provider", route.Provider.ID),
			attribute.String("gen_ai.system", route.Provider.Type), attribute.String("gen_ai.request.model", route.Model)))
	propagator.Inject(ctx, propagation.HeaderCarrier(hdr))
	return span
}

// endAttemptSpan ends an attempt's span with what it came to.
func endAttemptSpan(span trace.Span, res *attemptResult) {
	if span == nil {
		return
	}
	o := res.obs
	span.SetAttributes(attribute.String("oncegate.outcome_class", string(o.Kind.Class())), attribute.String("oncegate.kind", string(o.Kind)),
		attribute.Int("http.response.status_code", o.HTTPStatus), attribute.Bool("oncegate.visible_output", o.VisibleOutput),
		attribute.Int64("gen_ai.usage.input_tokens", o.Usage.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", o.Usage.OutputTokens))
	if res.route != nil {
		span.SetAttributes(attribute.Float64("oncegate.cost_usd", res.route.Price.Cost(o.Usage).USD()))
	}
	if o.Kind != gw.KindOK {
		span.SetStatus(codes.Error, string(o.Kind))
	}
	span.End()
}
