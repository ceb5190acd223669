// Package tokencount is POST /v1/messages/count_tokens (docs/api.md,
// "Token counts"): a provider's count of a request's input tokens, or the
// gateway's own estimate where none can be asked.
package tokencount

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// POST /v1/messages/count_tokens (docs/api.md, "Token counts") asks a
// provider, so it is held to what protects the providers' shared rate:
// the tenant's request rate and concurrency, a virtual key's models,
// rate and concurrency (docs/keys-and-teams.md), and the route's breaker. It
// is not a logical request — no generation, no retries, no cost, no
// idempotency — so it has no receipt; metrics and the access log record
// it.

// countOperation names token counts in metrics.
const countOperation = "count_tokens"

// ServeHTTP handles POST /v1/messages/count_tokens: the count of
// the first eligible Anthropic route's provider, or — where the alias has
// none, its breaker is open or it did not answer — the gateway's own
// estimate, labelled in the body ("oncegate": {"source": …}) and in
// X-Oncegate-Token-Count.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := provider.Anthropic
	t, release, apiErr := s.gw.Enter(r)
	if apiErr != nil {
		apiErr.Write(w, p, api.Meta{})
		return
	}
	defer release()
	a, ir, body, apiErr := s.read(w, r)
	if apiErr == nil {
		apiErr = s.gw.GateKey(r, a.Name)
	}
	if apiErr == nil {
		apiErr = s.gw.TakeRate(t)
	}
	if apiErr != nil {
		apiErr.Write(w, p, api.Meta{})
		return
	}
	n, route := provider.PromptTokens(ir), ""
	if rt := countRoute(a, t); rt != nil {
		if counted, ok := s.providerCount(r.Context(), rt, body, r.Header.Get("anthropic-beta"), a.Engine.Deadline); ok {
			n, route = counted, rt.ID
		}
	}
	source := "estimate"
	if route != "" {
		source = "provider"
	}
	s.metrics.ObserveAuxiliaryRequest(countOperation, source)
	accesslog.Of(r.Context()).Set(func(l *accesslog.Entry) { l.TokenCount, l.Routes = source, route })
	w.Header().Set("X-Oncegate-Token-Count", source)
	label := map[string]string{"source": source}
	if route != "" {
		label["route"] = route
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"input_tokens": n, "oncegate": label})
}

// read reads and checks a token count request: its body, parsed,
// and the alias it names.
func (s *Service) read(w http.ResponseWriter, r *http.Request) (*policy.Alias, *provider.Request, []byte, *api.Error) {
	_, body, apiErr := s.gw.ReadRequest(w, r)
	if apiErr != nil {
		return nil, nil, nil, apiErr
	}
	ir, err := provider.ParseCountTokens(body)
	if err != nil {
		return nil, nil, nil, api.InvalidRequest(err)
	}
	accesslog.Of(r.Context()).Set(func(l *accesslog.Entry) { l.Model = ir.Model })
	a := s.gw.Policy().Alias(ir.Model)
	if a == nil || a.Stateful {
		return nil, nil, nil, api.ModelNotFound(ir.Model)
	}
	return a, ir, body, nil
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
func (s *Service) providerCount(ctx context.Context, route *policy.Route, body []byte, beta string, deadline time.Duration) (int64, bool) {
	ticket, admitted := s.breakers.Acquire(route.ID)
	if !admitted {
		s.metrics.ObserveAuxiliaryAttempt(countOperation, route.ID, "circuit_open")
		return 0, false
	}
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	n, kind, _ := s.gw.AskCount(ctx, route, body, beta)
	outcome := breaker.OutcomeOf(kind)
	if ctx.Err() != nil && kind != gw.KindOK {
		outcome = breaker.Ignore // the caller left: nothing said about the route
	}
	s.breakers.Done(route.ID, ticket, outcome)
	s.metrics.ObserveAuxiliaryAttempt(countOperation, route.ID, string(kind))
	if kind != gw.KindOK {
		s.log.Warn("the provider did not count the tokens; answering the estimate", "route", route.ID, "kind", string(kind))
	}
	return n, kind == gw.KindOK
}

// Gateway is what a count needs of the gateway: the tenant and key
// admitted as every endpoint admits them, the body read within the
// limits, the tenant's rate, and one call to a route's provider.
type Gateway interface {
	// Policy is the configuration in force.
	Policy() *policy.Policy
	// Enter finds the request's tenant and counts it in progress until
	// release, or refuses it.
	Enter(r *http.Request) (t *policy.Tenant, release func(), _ *api.Error)
	// ReadRequest reads the body within limits.max_body_bytes.
	ReadRequest(w http.ResponseWriter, r *http.Request) (key string, body []byte, _ *api.Error)
	// GateKey checks the request's virtual key, if any, for model alias.
	GateKey(r *http.Request, alias string) *api.Error
	// TakeRate counts the request against its tenant's request rate.
	TakeRate(t *policy.Tenant) *api.Error
	// AskCount makes the provider's count call and classifies its outcome.
	AskCount(ctx context.Context, route *policy.Route, body []byte, beta string) (int64, gw.Kind, gw.Cause)
}

// Service answers POST /v1/messages/count_tokens.
type Service struct {
	gw       Gateway
	breakers breaker.Admitter
	metrics  *metrics.Metrics
	log      *slog.Logger
}

// New returns the count endpoint over g, asking providers through their
// routes' breakers.
func New(g Gateway, breakers breaker.Admitter, m *metrics.Metrics, log *slog.Logger) *Service {
	return &Service{gw: g, breakers: breakers, metrics: m, log: log}
}
