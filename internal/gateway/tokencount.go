package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/upstream"
)

// POST /v1/messages/count_tokens (docs/api.md, "Token counts") asks a
// provider, so it is held to what protects the providers' shared rate:
// the tenant's request rate and concurrency, a virtual key's models,
// rate and concurrency (docs/keys.md), and the route's breaker. It
// is not a logical request — no generation, no retries, no cost, no
// idempotency — so it has no receipt; metrics and the access log record
// it.

// countOperation names token counts in metrics.
const countOperation = "count_tokens"

// serveCountTokens handles POST /v1/messages/count_tokens: the count of
// the first eligible Anthropic route's provider, or — where the alias has
// none, its breaker is open or it did not answer — the gateway's own
// estimate, labelled in the body ("oncegate": {"source": …}) and in
// X-Oncegate-Token-Count.
func (g *Gateway) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	p := provider.Anthropic
	t, lk, release, apiErr := g.enterTenant(r)
	if apiErr != nil {
		apiErr.Write(w, p, api.Meta{})
		return
	}
	defer release()
	a, ir, body, apiErr := g.readCount(w, r)
	if apiErr == nil && lk != nil {
		apiErr = g.gateKey(lk, a.Name)
	}
	if apiErr == nil {
		apiErr = g.takeRate(t)
	}
	if apiErr != nil {
		apiErr.Write(w, p, api.Meta{})
		return
	}
	n, route := provider.PromptTokens(ir), ""
	if rt := countRoute(a, t); rt != nil {
		if counted, ok := g.providerCount(r.Context(), rt, body, r.Header.Get("anthropic-beta"), a.Engine.Deadline); ok {
			n, route = counted, rt.ID
		}
	}
	source := "estimate"
	if route != "" {
		source = "provider"
	}
	g.metrics.ObserveAuxiliaryRequest(countOperation, source)
	accesslog.Of(r.Context()).Set(func(l *accesslog.Entry) { l.TokenCount, l.Routes = source, route })
	w.Header().Set("X-Oncegate-Token-Count", source)
	label := map[string]string{"source": source}
	if route != "" {
		label["route"] = route
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": n, "oncegate": label})
}

// readCount reads and checks a token count request: its body, parsed,
// and the alias it names.
func (g *Gateway) readCount(w http.ResponseWriter, r *http.Request) (*policy.Alias, *provider.Request, []byte, *api.Error) {
	_, body, apiErr := g.readRequest(w, r)
	if apiErr != nil {
		return nil, nil, nil, apiErr
	}
	ir, err := provider.ParseCountTokens(body)
	if err != nil {
		return nil, nil, nil, invalidRequest(err)
	}
	accesslog.Of(r.Context()).Set(func(l *accesslog.Entry) { l.Model = ir.Model })
	a := g.policy().Alias(ir.Model)
	if a == nil || a.Stateful {
		return nil, nil, nil, modelNotFound(ir.Model)
	}
	return a, ir, body, nil
}

// takeRate counts a request against its tenant's request rate
// (budget.requests_per_minute), or refuses it.
func (g *Gateway) takeRate(t *policy.Tenant) *api.Error {
	ok, wait, err := g.tenants.Take(t.ID)
	if err != nil {
		e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
		e.RetryAfter = 1
		return e
	}
	if ok {
		return nil
	}
	g.metrics.ObserveTenantRejection(t.ID, api.CodeTenantRateLimited)
	e := api.Errorf(api.CodeTenantRateLimited, "tenant %s is over its %d requests per minute", t.ID, t.RequestsPerMinute)
	e.RetryAfter = int(math.Ceil(max(1, wait.Seconds())))
	return e
}

// countRoute is the route a count asks: the alias's first Anthropic
// route inside the tenant's data boundary (nil: none).
func countRoute(a *policy.Alias, t *policy.Tenant) *policy.Route {
	out := a.Ineligible(policy.Needs{}, t.MaxBoundary)
	for _, r := range a.Routes {
		if _, no := out[r.ID]; !no && r.Provider.Impl.Spec().CountTokens {
			return r
		}
	}
	return nil
}

// providerCount asks a route's provider to count a request's tokens, if
// its breaker admits the call, within the alias's deadline; the outcome
// goes to the breaker and to metrics. One call at most: a count that
// fails is answered with the estimate, never retried.
func (g *Gateway) providerCount(ctx context.Context, route *policy.Route, body []byte, beta string, deadline time.Duration) (int64, bool) {
	ticket, admitted := g.breakers.Acquire(route.ID)
	if !admitted {
		g.metrics.ObserveAuxiliaryAttempt(countOperation, route.ID, "circuit_open")
		return 0, false
	}
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	n, kind, _ := g.askCount(ctx, route, body, beta)
	outcome := breaker.OutcomeOf(kind)
	if ctx.Err() != nil && kind != gw.KindOK {
		outcome = breaker.Ignore // the caller left: nothing said about the route
	}
	g.breakers.Done(route.ID, ticket, outcome)
	g.metrics.ObserveAuxiliaryAttempt(countOperation, route.ID, string(kind))
	if kind != gw.KindOK {
		g.log.Warn("the provider did not count the tokens; answering the estimate", "route", route.ID, "kind", string(kind))
	}
	return n, kind == gw.KindOK
}

// askCount makes the call and classifies what came back as an attempt's
// outcome would be.
func (g *Gateway) askCount(ctx context.Context, route *policy.Route, body []byte, beta string) (int64, gw.Kind, gw.Cause) {
	uc := g.cur.Load().clients[route.Provider.ID]
	counter, ok := uc.ep.(provider.TokenCounter)
	if !ok {
		return 0, gw.KindInvalidRequest, ""
	}
	out, err := counter.CountRequest(body, route.Model, beta)
	if err != nil {
		return 0, gw.KindInvalidRequest, ""
	}
	resp, err := uc.Do(ctx, &upstream.Request{Method: out.Method, Path: out.Path, Body: out.Body, Header: out.Header})
	if err != nil {
		var ue *upstream.Error
		if errors.As(err, &ue) {
			k, cause := ue.Kind()
			return 0, k, cause
		}
		return 0, gw.KindTimeoutBeforeResponse, ""
	}
	defer resp.Body.Close()
	data, err := upstream.ReadAll(resp.Body, 1<<20)
	if resp.Status != http.StatusOK {
		_, k, cause := uc.ep.Fault(resp.Status, resp.Header, data)
		return 0, k, cause
	}
	var c struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err != nil || json.Unmarshal(data, &c) != nil || c.InputTokens == nil {
		return 0, gw.KindProtocolViolation, ""
	}
	return *c.InputTokens, gw.KindOK, ""
}
