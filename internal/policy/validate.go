package policy

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oncegate/oncegate/internal/catalog"
	"github.com/oncegate/oncegate/internal/config"
	rediscoord "github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/registry"
	"github.com/oncegate/oncegate/internal/retry"
)

// validator collects every violation in one pass over the configuration.
type validator struct {
	cfg      *config.Config
	errs     config.Errors
	warnings []*config.Error
}

// warn records what check points out without refusing the configuration.
func (v *validator) warn(path, format string, args ...any) {
	v.warnings = append(v.warnings, v.cfg.ErrorAt(path, format, args...))
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, v.cfg.ErrorAt(path, format, args...))
}

func (v *validator) boundary(path, s string) gw.DataBoundary {
	b, err := gw.ParseDataBoundary(s)
	if err != nil {
		v.fail(path, "%v", err)
	}
	return b
}

func (v *validator) oneOf(path, got string, allowed ...string) {
	if !slices.Contains(allowed, got) {
		v.fail(path, "unknown value %q (want one of: %s)", got, strings.Join(allowed, ", "))
	}
}

func (v *validator) positive(path string, x float64) {
	if x <= 0 {
		v.fail(path, "must be greater than 0")
	}
}

func (v *validator) nonNegative(path string, x float64) {
	if x < 0 {
		v.fail(path, "must not be negative")
	}
}

// webhook checks a webhook's URL and that its secret is named.
func (v *validator) webhook(path string, w config.Webhook) {
	switch {
	case w.URL == "" && w.SecretEnv != "":
		v.fail(path+".secret_env", "names a secret but %s.url is empty: set the url, or remove secret_env", path)
	case w.URL == "":
	case w.SecretEnv == "":
		v.fail(path+".secret_env", "required with url: events are signed with the secret it names")
		fallthrough
	default:
		if err := validURL(w.URL); err != nil {
			v.fail(path+".url", "%v", err)
		}
	}
}

// maxCostUSD is the largest cost ceiling a budget may set: nano-USD
// amounts are int64s, and sums of a few such ceilings must not overflow.
const maxCostUSD = 1e9

// cost checks a budget's cost ceiling in USD: finite, not negative, and
// at most maxCostUSD.
func (v *validator) cost(path string, x float64) {
	switch {
	case math.IsNaN(x) || x < 0:
		v.fail(path, "must be a cost in USD, not negative; found %v", x)
	case x > maxCostUSD:
		v.fail(path, "must be at most %g USD (0 for no cap); found %g", maxCostUSD, x)
	}
}

func (v *validator) modalities(path string, in []string) {
	for i, m := range in {
		v.oneOf(fmt.Sprintf("%s[%d]", path, i), m, InputText, InputImage, InputAudio)
	}
}

func (v *validator) globals() {
	c := v.cfg
	v.store(c.Store)
	v.coordination(c.Coordination, c.Store)
	v.oneOf("idempotency.on_expired", c.Idempotency.OnExpired, "new", "reject")
	v.oneOf("ledger.sync", c.Ledger.Sync, "full", "normal")
	if c.Store == "memory://" && c.Has("ledger.sync") {
		v.fail("ledger.sync", "store memory:// keeps nothing on disk: there is no durability to choose (remove ledger.sync, or use sqlite:// or postgres://)")
	}
	v.positive("idempotency.retention", float64(c.Idempotency.Retention))
	v.positive("conversations.max_ambiguous", float64(c.Conversations.MaxAmbiguous))
	v.positive("drain_timeout", float64(c.DrainTimeout))
	v.oneOf("log.format", c.Log.Format, "json", "text")
	if ep := c.Telemetry.OTLPEndpoint; ep != "" {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail("telemetry.otlp_endpoint", "want an http:// or https:// URL of an OTLP/HTTP collector, found %q", ep)
		}
	}
	v.webhook("alerts.budget_webhook", c.Alerts.BudgetWebhook)
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.nonNegative("retry_budget.ratio", c.RetryBudget.Ratio)
	v.nonNegative("retry_budget.min_per_second", c.RetryBudget.MinPerSecond)
	v.positive("retry_budget.window", float64(c.RetryBudget.Window))
	if r := c.Breaker.FailureRatio; r <= 0 || r > 1 {
		v.fail("breaker.failure_ratio", "must be in (0, 1], found %v", r)
	}
	v.positive("breaker.min_requests", float64(c.Breaker.MinRequests))
	v.positive("breaker.window", float64(c.Breaker.Window))
	v.positive("breaker.open_for", float64(c.Breaker.OpenFor))
	v.positive("breaker.half_open_probes", float64(c.Breaker.HalfOpenProbes))
	v.positive("limits.max_body_bytes", float64(c.Limits.MaxBodyBytes))
	v.positive("limits.body_read_timeout", float64(c.Limits.BodyReadTimeout))
	v.positive("limits.max_response_bytes", float64(c.Limits.MaxResponseBytes))
	v.positive("limits.max_stream_buffer_bytes", float64(c.Limits.MaxStreamBufferBytes))
	v.nonNegative("limits.memory_bytes", float64(c.Limits.MemoryBytes))
	v.nonNegative("limits.gc_headroom_bytes", float64(c.Limits.GCHeadroomBytes))
	if h := c.Limits.GCHeadroomBytes; h > 0 && h < 4<<20 {
		v.fail("limits.gc_headroom_bytes", "%d bytes would have the collector run after every few requests: give it at least 4194304 (4 MiB), or 0 for the default", h)
	}
	if m := c.Limits.MemoryBytes; m > 0 && m < 64<<20 {
		v.fail("limits.memory_bytes", "%d bytes is too little for a gateway to run in: give it at least 67108864 (64 MiB), or 0 for the default", m)
	}
	v.positive("lease.ttl", float64(c.Lease.TTL))
	v.positive("lease.renew", float64(c.Lease.Renew))
	if c.Lease.Renew > 0 && c.Lease.TTL > 0 && c.Lease.Renew*2 > c.Lease.TTL {
		v.fail("lease.renew", "must be at most half of lease.ttl (%v), so that one late renewal never loses a lease; found %v", c.Lease.TTL, c.Lease.Renew)
	}
}

func (v *validator) tenants() []*Tenant {
	var out []*Tenant
	seen := map[string]string{}
	for i, t := range v.cfg.Tenants {
		path := fmt.Sprintf("tenants[%d]", i)
		if prev, dup := seen[t.ID]; dup {
			v.fail(path+".id", "duplicate tenant id %q (first at %s)", t.ID, prev)
		}
		seen[t.ID] = path
		v.nonNegative(path+".budget.requests_per_minute", float64(t.Budget.RequestsPerMinute))
		v.cost(path+".budget.cost_usd_per_day", t.Budget.CostUSDPerDay)
		v.cost(path+".budget.cost_usd_per_month", t.Budget.CostUSDPerMonth)
		v.cost(path+".budget.cost_usd_total", t.Budget.CostUSDTotal)
		v.nonNegative(path+".budget.max_concurrent", float64(t.Budget.MaxConcurrent))
		out = append(out, &Tenant{ID: t.ID, APIKeyEnv: t.APIKeyEnv,
			MaxBoundary:       v.boundary(path+".max_data_boundary", t.MaxDataBoundary),
			RequestsPerMinute: t.Budget.RequestsPerMinute, CostPerDay: gw.NanoFromUSD(t.Budget.CostUSDPerDay),
			CostPerMonth: gw.NanoFromUSD(t.Budget.CostUSDPerMonth), CostTotal: gw.NanoFromUSD(t.Budget.CostUSDTotal),
			MaxConcurrent: t.Budget.MaxConcurrent, DropParams: t.DropParams})
	}
	if a := v.cfg.AdminTenant; a != "" {
		if _, ok := seen[a]; !ok {
			v.fail("admin_tenant", "names no tenant of this file: %q", a)
		}
		if v.cfg.AdminKeyEnv == "" && v.cfg.AdminKeyFile == "" {
			v.fail("admin_tenant", "needs an admin key (admin_key_env or admin_key_file)")
		}
	}
	return out
}

func (v *validator) providers() []*Provider {
	var out []*Provider
	seen := map[string]string{}
	for i, p := range v.cfg.Providers {
		path := fmt.Sprintf("providers[%d]", i)
		if prev, dup := seen[p.ID]; dup {
			v.fail(path+".id", "duplicate provider id %q (first at %s)", p.ID, prev)
		}
		seen[p.ID] = path
		impl := v.providerType(i, &v.cfg.Providers[i])
		base := strings.TrimRight(p.BaseURL, "/")
		if p.BaseURL != "" {
			if err := validURL(p.BaseURL); err != nil {
				v.fail(path+".base_url", "%v", err)
			}
		}
		v.headerNames(path+".headers", p.Headers)
		v.positive(path+".timeouts.connect", float64(p.Timeouts.Connect))
		v.positive(path+".timeouts.first_byte", float64(p.Timeouts.FirstByte))
		v.positive(path+".timeouts.idle", float64(p.Timeouts.Idle))
		out = append(out, &Provider{ID: p.ID, Type: p.Type, Impl: impl, Config: &v.cfg.Providers[i], BaseURL: base,
			APIKeyEnv: p.APIKeyEnv, Connect: p.Timeouts.Connect.D(), FirstByte: p.Timeouts.FirstByte.D(), Idle: p.Timeouts.Idle.D()})
	}
	return out
}

func (v *validator) routes(providers []*Provider) []*Route {
	var out []*Route
	seen := map[string]string{}
	for i, r := range v.cfg.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		if prev, dup := seen[r.ID]; dup {
			v.fail(path+".id", "duplicate route id %q (first defined at %s)", r.ID, v.cfg.ErrorAt(prev, "").Pos.String())
		}
		seen[r.ID] = path + ".id"
		var prov *Provider
		for _, p := range providers {
			if p.ID == r.Provider {
				prov = p
			}
		}
		if prov == nil {
			v.fail(path+".provider", "no provider with id %q", r.Provider)
		}
		caps := r.Capabilities
		price := v.price(path, r.Model, r.Price, &caps)
		v.modalities(path+".capabilities.input", caps.Input)
		v.oneOf(path+".capabilities.continuation", caps.Continuation, string(retry.ContinuationNone),
			string(retry.ContinuationPrefill), string(retry.ContinuationPrefixFlag), string(retry.ContinuationContinueMsg))
		if c := caps.Continuation; prov != nil && prov.Impl != nil && c != "" && c != string(retry.ContinuationNone) {
			if spec := prov.Impl.Spec(); !spec.Stateful && !slices.Contains(spec.Continuations, c) {
				v.fail(path+".capabilities.continuation", "a route of provider type %s cannot continue by %s (it can: %s)", prov.Type, c,
					strings.Join(append([]string{string(retry.ContinuationNone)}, spec.Continuations...), ", "))
			}
		}
		v.positive(path+".capabilities.max_context_tokens", float64(caps.MaxContextTokens))
		v.positive(path+".capabilities.max_output_tokens", float64(caps.MaxOutputTokens))
		if r.MaxAttempts < 1 {
			v.fail(path+".max_attempts", "must be at least 1, found %d", r.MaxAttempts)
		}
		v.nonNegative(path+".price.input_usd_per_mtok", price.InputUSDPerMTok)
		v.nonNegative(path+".price.output_usd_per_mtok", price.OutputUSDPerMTok)
		if c := price.CachedInputUSDPerMTok; c != nil {
			v.nonNegative(path+".price.cached_input_usd_per_mtok", *c)
		}
		if c := price.CacheWriteUSDPerMTok; c != nil {
			v.nonNegative(path+".price.cache_write_usd_per_mtok", *c)
		}
		out = append(out, &Route{
			ID: r.ID, Provider: prov, Model: r.Model, Release: r.Release, BehaviorClass: r.BehaviorClass,
			Caps: Capabilities{Input: caps.Input, Tools: caps.Tools, JSONSchema: caps.JSONSchema, Streaming: caps.Streaming,
				MaxContextTokens: caps.MaxContextTokens, MaxOutputTokens: caps.MaxOutputTokens,
				Continuation: retry.Continuation(caps.Continuation)},
			Boundary:            v.boundary(path+".data_boundary", r.DataBoundary),
			SupportsIdempotency: r.SupportsIdempotency, MaxAttempts: r.MaxAttempts,
			Price: gw.PriceFromPerMTok(price.InputUSDPerMTok, price.OutputUSDPerMTok).
				WithCachePrices(price.CachedInputUSDPerMTok, price.CacheWriteUSDPerMTok),
			PriceUSDPerMTok: [2]float64{price.InputUSDPerMTok, price.OutputUSDPerMTok},
			Weight:          r.Weight, RPM: r.RPM, TPM: r.TPM,
		})
		if r.Weight < 1 {
			v.fail(path+".weight", "must be at least 1, found %d", r.Weight)
		}
		v.nonNegative(path+".rpm", float64(r.RPM))
		v.nonNegative(path+".tpm", float64(r.TPM))
	}
	return out
}

func (v *validator) aliases(routes []*Route) []*Alias {
	var out []*Alias
	seen := map[string]bool{}
	for i, m := range v.cfg.Models {
		path := fmt.Sprintf("models[%d]", i)
		if seen[m.Name] {
			v.fail(path+".name", "duplicate model alias %q", m.Name)
		}
		seen[m.Name] = true
		a := &Alias{Name: m.Name, Require: m.Require, Buffer: m.Stream.Buffer, HedgeAfter: m.Hedge.After.D(),
			MaxBoundary: v.boundary(path+".require.max_data_boundary", m.Require.MaxDataBoundary)}
		v.modalities(path+".require.input", m.Require.Input)
		if len(m.Routes) == 0 {
			v.fail(path+".routes", "an alias needs at least one route")
		}
		refs := map[string]bool{}
		var tierOf []int // per route of a.Routes
		shared := false  // some tier holds several routes
		for j, tier := range m.Routes {
			shared = shared || len(tier) > 1
			for k, id := range tier {
				rpath := fmt.Sprintf("%s.routes[%d]", path, j)
				if len(tier) > 1 {
					rpath = fmt.Sprintf("%s[%d]", rpath, k)
				}
				if refs[id] {
					v.fail(rpath, "route %q is listed twice", id)
					continue
				}
				refs[id] = true
				r := findRoute(routes, id)
				if r == nil {
					v.fail(rpath, "no route with id %q", id)
					continue
				}
				v.admit(a, r, rpath)
				a.Routes = append(a.Routes, r)
				tierOf = append(tierOf, j)
			}
		}
		v.stateful(a, path)
		if m.Hedge.After > 0 && len(a.Routes) < 2 {
			v.fail(path+".hedge.after", "hedging needs a second route to hedge to")
		}
		v.oneOf(path+".strategy", m.Strategy, string(retry.StrategyOrdered), string(retry.StrategyWeighted), string(retry.StrategyLeastBusy),
			string(retry.StrategyLatency), string(retry.StrategyQuota))
		if m.Strategy != string(retry.StrategyOrdered) && !shared {
			v.fail(path+".strategy", "strategy %s spreads load within a tier, and alias %q has no tier of several routes (write one as a list: routes: [[east, west], fallback])",
				m.Strategy, a.Name)
		}
		a.Engine = v.engine(path, m, a.Routes)
		a.Engine.Strategy, a.Engine.Tiered = retry.Strategy(m.Strategy), shared
		for j := range a.Engine.Routes {
			a.Engine.Routes[j].Tier = tierOf[j]
		}
		v.reachable(a, m, path)
		a.MayDrop = v.mayDrop(path+".may_drop", m.MayDrop, a.Routes)
		a.DropParams = v.cfg.DropParams
		if m.DropParams != nil {
			a.DropParams = *m.DropParams
		}
		a.KeylessJoin = m.KeylessJoin
		out = append(out, a)
	}
	return out
}

// reachable checks that the alias's cost cap lets every route serve a
// request whose client set no output limit: an attempt at the default
// output limit (default_output_tokens, else the route's
// max_output_tokens), with no prompt at all, must cost no more than
// max_cost_usd. A route that fails it could never be tried for such a
// request — its fallback silently disabled until an outage shows it — so
// it is an error naming the route, unless accept_unreachable_routes
// acknowledges it (docs/configuration.md).
func (v *validator) reachable(a *Alias, m config.Model, path string) {
	e := a.Engine
	if e.MaxCost <= 0 || m.AcceptUnreachableRoutes {
		return
	}
	for j := range e.Routes {
		r := &e.Routes[j]
		out := retry.OutputLimit(e, r, 0)
		if worst := r.Price.WorstCase(0, out); worst > e.MaxCost {
			hint := "set default_output_tokens on the alias"
			if e.DefaultOutputTokens > 0 {
				hint = "lower default_output_tokens"
			}
			v.fail(fmt.Sprintf("%s.routes[%d]", path, j), "route %q can never be tried for a request without max_tokens: one attempt at %d output tokens costs $%g, over the alias's max_cost_usd $%g (%s, raise max_cost_usd, or set accept_unreachable_routes: true if every client sends max_tokens)",
				r.ID, out, worst.USD(), e.MaxCost.USD(), hint)
		}
	}
}

// mayDrop checks an alias's may_drop: every name a field that may be
// dropped (provider.Droppable, for either protocol, or the field table
// of one of the alias's route types).
func (v *validator) mayDrop(path string, names []string, routes []*Route) []string {
	for i, n := range names {
		if !provider.Droppable(provider.OpenAI, n) && !provider.Droppable(provider.Anthropic, n) && !DroppableOn(routes, n) {
			v.fail(fmt.Sprintf("%s[%d]", path, i), "%q is not a field a route may drop (droppable: %s)", n, strings.Join(provider.DroppableNames(), ", "))
		}
	}
	return slices.Clone(names)
}

// DroppableOn reports whether a route of a type with its own field table
// (provider.FieldTable) among routes may drop field name of either
// protocol.
func DroppableOn(routes []*Route, name string) bool {
	for _, r := range routes {
		if r.Provider == nil {
			continue
		}
		if ft, ok := r.Provider.Impl.(provider.FieldTable); ok && (ft.Droppable(provider.OpenAI, name) || ft.Droppable(provider.Anthropic, name)) {
			return true
		}
	}
	return false
}

// stateful checks an alias's openai-responses routes: an alias is
// stateful (every route keeps the conversation upstream, and it serves
// /v1/responses only) or has none; a stateful route cannot be continued
// by prefill, and a stateful alias is never hedged.
func (v *validator) stateful(a *Alias, path string) {
	n := 0
	for j, r := range a.Routes {
		if r.Provider == nil || r.Provider.Impl == nil || !r.Provider.Impl.Spec().Stateful {
			continue
		}
		n++
		if r.Caps.Continuation != "" && r.Caps.Continuation != retry.ContinuationNone {
			v.fail(fmt.Sprintf("%s.routes[%d]", path, j), "route %q is a stateful route (%s): its conversation lives upstream, so it cannot be continued by %s (use continuation: none)",
				r.ID, r.Provider.Type, r.Caps.Continuation)
		}
	}
	switch {
	case n == 0:
	case n < len(a.Routes):
		v.fail(path+".routes", "alias %q mixes stateful routes (openai-responses) with others: a stateful alias keeps its conversations upstream, so all its routes must be stateful", a.Name)
	default:
		a.Stateful = true
		if a.HedgeAfter > 0 {
			v.fail(path+".hedge.after", "alias %q is stateful (its routes keep conversations upstream): a hedge would append the turn twice", a.Name)
		}
	}
}

// admit checks one route against its alias's contract (docs/configuration.md).
func (v *validator) admit(a *Alias, r *Route, rpath string) {
	req := a.Require
	where := fmt.Sprintf("route %q", r.ID)
	for _, m := range req.Input {
		if !r.Caps.Accepts(m) {
			v.fail(rpath, "%s lacks %s input required by alias %q (capability gap)", where, m, a.Name)
		}
	}
	gaps := []struct {
		need, has bool
		what      string
	}{{req.Tools, r.Caps.Tools, "tools"}, {req.JSONSchema, r.Caps.JSONSchema, "json_schema"}, {req.Streaming, r.Caps.Streaming, "streaming"}}
	for _, g := range gaps {
		if g.need && !g.has {
			v.fail(rpath, "%s lacks %s required by alias %q (capability gap)", where, g.what, a.Name)
		}
	}
	want := req.BehaviorClass
	if want == "" && len(a.Routes) > 0 {
		want = a.Routes[0].BehaviorClass
	}
	if want != "" && r.BehaviorClass != want {
		v.fail(rpath, "%s has behavior_class %q but alias %q requires %q (behaviour-class mismatch)", where, r.BehaviorClass, a.Name, want)
	}
	if r.Boundary > a.MaxBoundary && a.MaxBoundary != 0 {
		v.fail(rpath, "%s sends data to %s but alias %q allows at most %s (data boundary)", where, r.Boundary, a.Name, a.MaxBoundary)
	}
	if req.Idempotency && !r.SupportsIdempotency {
		v.fail(rpath, "%s does not support idempotency keys, which alias %q requires", where, a.Name)
	}
}

// engine builds the alias's retry policy and checks its bounds.
func (v *validator) engine(path string, m config.Model, routes []*Route) *retry.Policy {
	rt := m.Retry
	if rt.MaxAttempts < 1 {
		v.fail(path+".retry.max_attempts", "must be at least 1, found %d", rt.MaxAttempts)
	}
	if rt.MaxDelay < rt.BaseDelay {
		v.fail(path+".retry.max_delay", "max_delay %v is less than base_delay %v", rt.MaxDelay, rt.BaseDelay)
	}
	v.positive(path+".retry.deadline", float64(rt.Deadline))
	v.nonNegative(path+".retry.max_cost_usd", rt.MaxCostUSD)
	v.oneOf(path+".retry.jitter", rt.Jitter, string(retry.JitterFull), string(retry.JitterNone))
	v.oneOf(path+".stream.after_output", m.Stream.AfterOutput, string(retry.AfterOutputResume), string(retry.AfterOutputRestart), string(retry.AfterOutputStop))
	v.nonNegative(path+".stream.restart_max_tokens", float64(m.Stream.RestartMaxTokens))
	v.oneOf(path+".stream.resume_routes", m.Stream.ResumeRoutes, string(retry.ResumeAny), string(retry.ResumeSame))
	p := &retry.Policy{MaxAttempts: rt.MaxAttempts, BaseDelay: rt.BaseDelay.D(), MaxDelay: rt.MaxDelay.D(),
		RetryAfterCap: rt.RetryAfterCap.D(), Jitter: retry.Jitter(rt.Jitter), Deadline: rt.Deadline.D(),
		MaxCost: gw.NanoFromUSD(rt.MaxCostUSD), AfterOutput: retry.AfterOutput(m.Stream.AfterOutput),
		RestartMaxTokens: int64(m.Stream.RestartMaxTokens), ResumeRoutes: retry.ResumeRoutes(m.Stream.ResumeRoutes), HedgeAfter: m.Hedge.After.D(),
		DefaultOutputTokens: int64(m.DefaultOutputTokens)}
	v.nonNegative(path+".default_output_tokens", float64(m.DefaultOutputTokens))
	for _, r := range routes {
		provider := ""
		if r.Provider != nil { // nil: an unknown provider, already reported
			provider = r.Provider.ID
		}
		p.Routes = append(p.Routes, retry.Route{ID: r.ID, Provider: provider, Weight: r.Weight, MaxAttempts: r.MaxAttempts, MaxContextTokens: r.Caps.MaxContextTokens,
			MaxOutputTokens: r.Caps.MaxOutputTokens, Price: r.Price, Continuation: r.Caps.Continuation})
	}
	return p
}

func findRoute(routes []*Route, id string) *Route {
	for _, r := range routes {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// store checks the store URL: a scheme this binary serves, and a URL its
// driver accepts.
func (v *validator) store(s string) {
	switch {
	case s == "memory://":
	case strings.HasPrefix(s, "sqlite://"):
		if strings.TrimPrefix(s, "sqlite://") == "" {
			v.fail("store", "sqlite:// names no file (want sqlite://PATH)")
		}
	case IsPostgres(s):
		if _, err := pgconn.ParseConfig(s); err != nil {
			v.fail("store", "%v", err)
		}
	default:
		v.fail("store", "want sqlite://PATH, postgres://… or memory://, found %q", s)
	}
}

// IsPostgres reports whether a store URL names PostgreSQL.
func IsPostgres(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// IsRedis reports whether a coordination URL names Redis: one server, a
// Sentinel's, or a cluster (docs/replicas.md).
func IsRedis(coordination string) bool { return rediscoord.IsURL(coordination) }

// coordination checks the coordination URL, and that replicas sharing it
// can share the store too.
func (v *validator) coordination(s, store string) {
	switch {
	case s == "local":
	case IsRedis(s):
		if _, err := rediscoord.ParseURL(s); err != nil {
			v.fail("coordination", "%v", err)
		}
		if !IsPostgres(store) {
			v.fail("coordination", "%s shares state between several gateways, but store %q can be opened by one process only: use postgres://… (or coordination: local)", rediscoord.Redact(s), store)
		}
	default:
		v.fail("coordination", "want local or redis://… (redis+sentinel://… for Redis Sentinel, redis+cluster://… for Redis Cluster), found %q", s)
	}
}

// providerType looks up providers[i]'s type in the registry and holds its
// keys to what the type declares (docs/providers.md): every required key
// set, no key the type does not know. The type then opens the provider
// without its secrets, to find what only it can check.
func (v *validator) providerType(i int, p *config.Provider) provider.Type {
	path := fmt.Sprintf("providers[%d]", i)
	impl, ok := registry.Lookup(p.Type)
	if !ok {
		v.fail(path+".type", "unknown provider type %q (want one of: %s)", p.Type, strings.Join(registry.Names(), ", "))
		return nil
	}
	if pc, ok := impl.(provider.PerConfig); ok {
		impl = pc.For(p)
	}
	spec := impl.Spec()
	typ := p.Type
	if spec.Variant != "" {
		typ += " with " + spec.Variant
	}
	for _, key := range registry.Keys() {
		if v.cfg.Has(path+"."+key) && !slices.Contains(spec.Allowed, key) {
			v.fail(path+"."+key, "provider type %s has no key %q (its keys: %s)", typ, key, strings.Join(spec.Allowed, ", "))
		}
	}
	for _, req := range spec.Required {
		alts := registry.Alternatives(req)
		if !slices.ContainsFunc(alts, func(k string) bool { return v.cfg.Has(path + "." + k) }) {
			v.fail(path, "provider type %s needs %s", typ, strings.Join(alts, " or "))
		}
	}
	if _, err := impl.Open(provider.Config{Provider: p, Lookup: func(string) (string, bool) { return "", false }}); err != nil {
		var ce *provider.ConfigError
		if errors.As(err, &ce) {
			v.fail(path+"."+ce.Key, "%v", ce.Err)
		} else {
			v.fail(path, "%v", err)
		}
	}
	return impl
}

// headerNames checks a provider's extra headers: each a valid field name,
// none of those the gateway or the transport sets itself.
func (v *validator) headerNames(path string, hs config.Values) {
	for _, h := range hs {
		c := http.CanonicalHeaderKey(h.Name)
		switch {
		case strings.IndexFunc(h.Name, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) }) >= 0:
			v.fail(path+"."+h.Name, "%q is not a header name", h.Name)
		case c == "Host" || c == "Content-Type" || c == "Content-Length" || c == "Transfer-Encoding" || c == "Connection" ||
			c == "Idempotency-Key" || strings.HasPrefix(c, "X-Oncegate-"):
			v.fail(path+"."+h.Name, "the gateway sets %s itself", c)
		}
	}
}

// price is a route's price: the one it states, else the model
// catalogue's for its model (docs/routing.md), which also fills the
// context window and output limit the route leaves out. It warns when a
// route bills nothing for want of a price, and when a stated price is
// more than twice or less than half the catalogue's.
func (v *validator) price(path, model string, stated config.Price, caps *config.Capabilities) config.Price {
	entry, known := catalog.Lookup(model)
	if known {
		if !v.cfg.Has(path + ".capabilities.max_context_tokens") {
			caps.MaxContextTokens = entry.Context
		}
		if !v.cfg.Has(path + ".capabilities.max_output_tokens") {
			caps.MaxOutputTokens = entry.MaxOutput
		}
	}
	if !v.cfg.Has(path + ".price") {
		if !known {
			v.warn(path+".model", "model %q is not in the model catalogue and the route states no price: it bills $0 (run `oncegate models` for the catalogue, or add price)", model)
			return stated
		}
		p := config.Price{InputUSDPerMTok: entry.Input, OutputUSDPerMTok: entry.Output}
		if entry.CachedInput > 0 {
			p.CachedInputUSDPerMTok = &entry.CachedInput
		}
		if entry.CacheWrite > 0 {
			p.CacheWriteUSDPerMTok = &entry.CacheWrite
		}
		return p
	}
	if known {
		for _, c := range []struct {
			field          string
			stated, listed float64
		}{{"input_usd_per_mtok", stated.InputUSDPerMTok, entry.Input}, {"output_usd_per_mtok", stated.OutputUSDPerMTok, entry.Output}} {
			if c.listed > 0 && (c.stated > 2*c.listed || c.stated < c.listed/2) {
				v.warn(path+".price."+c.field, "%g differs from the catalogue's %g for %s by more than a factor of two (catalogue compiled %s)",
					c.stated, c.listed, entry.Name, catalog.Compiled)
			}
		}
	}
	return stated
}
