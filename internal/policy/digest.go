package policy

import (
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
)

// The digest documents: every field that changes what a request may do
// or where it may go, and nothing secret (env variable names included, so
// renaming a variable does not change the policy).
type routeDoc struct {
	ID                  string     `json:"id"`
	Provider            string     `json:"provider"`
	ProviderType        string     `json:"provider_type"`
	BaseURL             string     `json:"base_url"`
	Model               string     `json:"model"`
	Release             string     `json:"release"`
	Input               []string   `json:"input"`
	Tools               bool       `json:"tools"`
	JSONSchema          bool       `json:"json_schema"`
	Streaming           bool       `json:"streaming"`
	MaxContextTokens    int64      `json:"max_context_tokens"`
	MaxOutputTokens     int64      `json:"max_output_tokens"`
	Continuation        string     `json:"continuation"`
	BehaviorClass       string     `json:"behavior_class"`
	DataBoundary        string     `json:"data_boundary"`
	SupportsIdempotency bool       `json:"supports_idempotency"`
	MaxAttempts         int        `json:"max_attempts"`
	PriceNanoPerToken   [2]int64   `json:"price_nano_usd_per_token"`
	Timeouts            [3]float64 `json:"timeouts_seconds"`
	// CachePriceNanoPerToken is the price of cache reads and writes,
	// omitted when both are the input price, so that policies without
	// cache prices keep their digests.
	CachePriceNanoPerToken *[2]int64 `json:"cache_price_nano_usd_per_token,omitempty"`
	// Tier, Weight, RPM and TPM shape how a tiered alias spreads load;
	// omitted when untiered (and at their defaults), so that other
	// policies keep their digests.
	// Settings are the provider's keys that say where a request goes
	// (api_version, region, project, location, publisher), and Headers
	// and Query the names — never the values — of its extra headers and
	// query parameters; omitted when none, so that other policies keep
	// their digests.
	Settings map[string]string `json:"provider_settings,omitempty"`
	Headers  []string          `json:"header_names,omitempty"`
	Query    []string          `json:"query_names,omitempty"`
	Tier     *int              `json:"tier,omitempty"`
	Weight   int               `json:"weight,omitempty"`
	RPM      int               `json:"rpm,omitempty"`
	TPM      int               `json:"tpm,omitempty"`
}

type aliasDoc struct {
	Name             string     `json:"name"`
	Routes           []routeDoc `json:"routes"`
	MaxDataBoundary  string     `json:"max_data_boundary"`
	MaxAttempts      int        `json:"max_attempts"`
	BaseDelayMS      int64      `json:"base_delay_ms"`
	MaxDelayMS       int64      `json:"max_delay_ms"`
	RetryAfterCapMS  int64      `json:"retry_after_cap_ms"`
	Jitter           string     `json:"jitter"`
	DeadlineMS       int64      `json:"deadline_ms"`
	MaxCostNanoUSD   int64      `json:"max_cost_nano_usd"`
	AfterOutput      string     `json:"after_output"`
	RestartMaxTokens int64      `json:"restart_max_tokens"`
	ResumeRoutes     string     `json:"resume_routes"`
	Buffer           bool       `json:"buffer"`
	HedgeAfterMS     int64      `json:"hedge_after_ms"`
	// Omitted at 0, so that policies without it keep their digests.
	DefaultOutputTokens int64    `json:"default_output_tokens,omitempty"`
	MayDrop             []string `json:"may_drop,omitempty"`
	DropParams          bool     `json:"drop_params,omitempty"`
	Strategy            string   `json:"strategy,omitempty"`
	KeylessJoin         *bool    `json:"keyless_join,omitempty"`
}

func aliasDigest(a *Alias) (string, error) {
	e := a.Engine
	doc := aliasDoc{Name: a.Name, MaxDataBoundary: a.MaxBoundary.String(), MaxAttempts: e.MaxAttempts,
		BaseDelayMS: e.BaseDelay.Milliseconds(), MaxDelayMS: e.MaxDelay.Milliseconds(),
		RetryAfterCapMS: e.RetryAfterCap.Milliseconds(), Jitter: string(e.Jitter), DeadlineMS: e.Deadline.Milliseconds(),
		MaxCostNanoUSD: int64(e.MaxCost), AfterOutput: string(e.AfterOutput), RestartMaxTokens: e.RestartMaxTokens,
		ResumeRoutes: string(e.ResumeRoutes), Buffer: a.Buffer, HedgeAfterMS: a.HedgeAfter.Milliseconds(), Routes: []routeDoc{},
		DefaultOutputTokens: e.DefaultOutputTokens, MayDrop: a.MayDrop, DropParams: a.DropParams, KeylessJoin: a.KeylessJoin}
	if e.Tiered {
		doc.Strategy = string(e.Strategy)
	}
	for j, r := range a.Routes {
		p := r.Provider
		var tier *int
		weight := 0
		if e.Tiered {
			t := e.Routes[j].Tier
			tier, weight = &t, r.Weight
		}
		doc.Routes = append(doc.Routes, routeDoc{Tier: tier, Weight: weight, RPM: r.RPM, TPM: r.TPM, ID: r.ID, Provider: p.ID, ProviderType: p.Type, BaseURL: p.BaseURL,
			Model: r.Model, Release: r.Release, Input: r.Caps.Input, Tools: r.Caps.Tools, JSONSchema: r.Caps.JSONSchema,
			Streaming: r.Caps.Streaming, MaxContextTokens: r.Caps.MaxContextTokens, MaxOutputTokens: r.Caps.MaxOutputTokens,
			Continuation: string(r.Caps.Continuation), BehaviorClass: r.BehaviorClass, DataBoundary: r.Boundary.String(),
			SupportsIdempotency: r.SupportsIdempotency, MaxAttempts: r.MaxAttempts,
			PriceNanoPerToken:      [2]int64{int64(r.Price.InputPerToken), int64(r.Price.OutputPerToken)},
			Timeouts:               [3]float64{p.Connect.Seconds(), p.FirstByte.Seconds(), p.Idle.Seconds()},
			CachePriceNanoPerToken: cachePriceDoc(r.Price),
			Settings:               settingsDoc(p), Headers: valueNames(p.Config.Headers), Query: valueNames(p.Config.Query)})
	}
	return identity.CanonicalSHA256(doc)
}

// cachePriceDoc is a route's cache prices for its digest: nil while both
// are the input price.
func cachePriceDoc(p gw.Price) *[2]int64 {
	if p.CachedInput() == p.InputPerToken && p.CacheWrite() == p.InputPerToken {
		return nil
	}
	return &[2]int64{int64(p.CachedInput()), int64(p.CacheWrite())}
}

type tenantDoc struct {
	ID                string `json:"id"`
	MaxDataBoundary   string `json:"max_data_boundary"`
	RequestsPerMinute int    `json:"requests_per_minute"`
	CostNanoUSDPerDay int64  `json:"cost_nano_usd_per_day"`
	// Omitted at 0, so that policies without it keep their digests.
	MaxConcurrent int   `json:"max_concurrent,omitempty"`
	DropParams    *bool `json:"drop_params,omitempty"`
	CostPerMonth  int64 `json:"cost_nano_usd_per_month,omitempty"`
	CostTotal     int64 `json:"cost_nano_usd_total,omitempty"`
}

type policyDoc struct {
	Aliases     map[string]string `json:"aliases"`
	Tenants     []tenantDoc       `json:"tenants"`
	Idempotency any               `json:"idempotency"`
	RetryBudget any               `json:"retry_budget"`
	Breaker     any               `json:"breaker"`
	Limits      any               `json:"limits"`
}

func policyDigest(p *Policy) (string, error) {
	doc := policyDoc{Aliases: map[string]string{}, Tenants: []tenantDoc{},
		Idempotency: p.Idempotency, RetryBudget: p.RetryBudget, Breaker: p.Breaker, Limits: p.Limits}
	for _, a := range p.Aliases {
		doc.Aliases[a.Name] = a.Digest
	}
	for _, t := range p.Tenants {
		doc.Tenants = append(doc.Tenants, tenantDoc{t.ID, t.MaxBoundary.String(), t.RequestsPerMinute, int64(t.CostPerDay), t.MaxConcurrent, t.DropParams,
			int64(t.CostPerMonth), int64(t.CostTotal)})
	}
	return identity.CanonicalSHA256(doc)
}

// settingsDoc lists the provider keys that say where its requests go.
func settingsDoc(p *Provider) map[string]string {
	c := p.Config
	out := map[string]string{}
	for k, v := range map[string]string{"api_version": c.APIVersion, "region": c.Region, "project": c.Project,
		"location": c.Location, "publisher": c.Publisher} {
		if v != "" {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// valueNames lists the names of headers or query parameters.
func valueNames(vs config.Values) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}
