// Package policy compiles a configuration into the route table the gateway
// admits requests against (docs/configuration.md). Compile validates every rule
// before admission and reports all violations at once, each with its file
// position; a compiled Policy is immutable and safe for concurrent use.
package policy

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/retry"
)

// Modalities a route may accept.
const (
	InputText  = "text"
	InputImage = "image"
	InputAudio = "audio"
)

// Policy is a compiled configuration.
type Policy struct {
	// Digest is the hex SHA-256 of the whole canonical policy.
	Digest    string
	Tenants   []*Tenant
	Providers []*Provider
	Routes    []*Route
	Aliases   []*Alias

	Idempotency   config.Idempotency
	Conversations config.Conversations
	RetryBudget   config.RetryBudget
	Breaker       config.Breaker
	Limits        config.Limits
	Config        *config.Config
	// Warnings are what `check` points out without refusing the
	// configuration: a route that bills $0 for want of a price, or whose
	// price is far from the catalogue's.
	Warnings []*config.Error
}

// Tenant is an authenticated caller's limits.
type Tenant struct {
	ID                string
	APIKeyEnv         string
	MaxBoundary       gw.DataBoundary
	RequestsPerMinute int
	CostPerDay        gw.NanoUSD // 0: no ceiling
	CostPerMonth      gw.NanoUSD // per UTC month; 0: no ceiling
	CostTotal         gw.NanoUSD // over the tenant's life; 0: no ceiling
	MaxConcurrent     int        // per gateway process; 0: no cap
	// DropParams, when set, is drop_params for the tenant's requests,
	// over the alias's (docs/translation.md).
	DropParams *bool
}

// Provider is an upstream endpoint.
type Provider struct {
	ID string
	// Type is the configuration's type name; Impl its implementation,
	// from the provider registry (docs/providers.md). Nothing outside the
	// registry tells types apart by name: ask Impl.Spec().
	Type string
	Impl provider.Type
	// Config is the provider's configuration as written, which Impl
	// opens (with its secrets) at start and at every reload.
	Config    *config.Provider
	BaseURL   string
	APIKeyEnv string
	Connect   time.Duration
	FirstByte time.Duration
	Idle      time.Duration
}

// Capabilities is a route's capability contract.
type Capabilities struct {
	Input            []string
	Tools            bool
	JSONSchema       bool
	Streaming        bool
	MaxContextTokens int64
	MaxOutputTokens  int64
	Continuation     retry.Continuation
}

// Accepts reports whether the route takes input modality m.
func (c Capabilities) Accepts(m string) bool { return slices.Contains(c.Input, m) }

// Route is one exact upstream path.
type Route struct {
	ID                  string
	Provider            *Provider
	Model               string
	Release             string
	Caps                Capabilities
	BehaviorClass       string
	Boundary            gw.DataBoundary
	SupportsIdempotency bool
	MaxAttempts         int
	Price               gw.Price
	PriceUSDPerMTok     [2]float64 // input, output: as configured, for display
	// Weight is the route's share of a weighted tier; RPM and TPM its own
	// rate limits, which strategy quota keeps under (0: none).
	Weight   int
	RPM, TPM int
}

// Alias is a model name with its ordered routes and policies.
type Alias struct {
	Name string
	// Stateful: every route is openai-responses (the conversation lives
	// upstream); the alias serves /v1/responses only.
	Stateful    bool
	Routes      []*Route
	MaxBoundary gw.DataBoundary
	Require     config.Require
	// Engine is the alias's retry policy in the engine's terms.
	Engine     *retry.Policy
	Buffer     bool
	HedgeAfter time.Duration
	// MayDrop lists the request fields routes of the other protocol may
	// drop (docs/translation.md).
	MayDrop []string
	// DropParams: the alias's drop_params, or else the top level's — a
	// droppable field a route cannot carry is dropped rather than keeping
	// the request off it (docs/translation.md). A tenant, a virtual key
	// or the request may set it over this.
	DropParams bool
	// KeylessJoin, when not nil, is the alias's own keyless_join
	// (docs/identity.md).
	KeylessJoin *bool
	// Digest is the hex SHA-256 of the alias's canonical policy; receipts
	// carry it as policy_sha256.
	Digest string
}

// Alias returns the alias named name, or nil.
func (p *Policy) Alias(name string) *Alias {
	for _, a := range p.Aliases {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Tenant returns the tenant with id, or nil.
func (p *Policy) Tenant(id string) *Tenant {
	for _, t := range p.Tenants {
		if t.ID == id {
			return t
		}
	}
	return nil
}

// Route returns the route with id, or nil.
func (p *Policy) Route(id string) *Route {
	for _, r := range p.Routes {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// Route returns the alias's route with id, or nil.
func (a *Alias) Route(id string) *Route {
	for _, r := range a.Routes {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// Compile validates cfg (docs/configuration.md) and builds the policy. On failure the
// error is a config.Errors holding every violation.
func Compile(cfg *config.Config) (*Policy, error) {
	v := &validator{cfg: cfg}
	p := &Policy{Idempotency: cfg.Idempotency, Conversations: cfg.Conversations, RetryBudget: cfg.RetryBudget, Breaker: cfg.Breaker, Limits: cfg.Limits, Config: cfg}
	v.globals()
	p.Tenants = v.tenants()
	p.Providers = v.providers()
	p.Routes = v.routes(p.Providers)
	p.Aliases = v.aliases(p.Routes)
	if len(v.errs) > 0 {
		return nil, v.errs
	}
	p.Warnings = v.warnings
	for _, a := range p.Aliases {
		d, err := aliasDigest(a)
		if err != nil {
			return nil, fmt.Errorf("digest alias %s: %w", a.Name, err)
		}
		a.Digest = d
		a.Engine.Digest = d
	}
	d, err := policyDigest(p)
	if err != nil {
		return nil, fmt.Errorf("digest policy: %w", err)
	}
	p.Digest = d
	return p, nil
}

// Parse decodes and compiles a configuration held in memory (name labels
// its errors).
func Parse(name string, data []byte) (*Policy, error) {
	cfg, err := config.Parse(name, data)
	if err != nil {
		return nil, err
	}
	return Compile(cfg)
}

// Load reads, decodes and compiles the file at path. Decoding and
// validation problems are reported together, in file order; a semantic
// finding about a field that failed to decode is left out.
func Load(path string) (*Policy, error) {
	cfg, err := config.Load(path)
	if cfg == nil {
		return nil, err
	}
	var decodeErrs config.Errors
	if err != nil && !errors.As(err, &decodeErrs) {
		return nil, err
	}
	p, err := Compile(cfg)
	if len(decodeErrs) == 0 {
		return p, err
	}
	all := append(config.Errors{}, decodeErrs...)
	var semantic config.Errors
	if errors.As(err, &semantic) {
		for _, e := range semantic {
			if !underAny(e.Path, decodeErrs) {
				all = append(all, e)
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i].Pos, all[j].Pos
		return a.Line < b.Line || (a.Line == b.Line && a.Column < b.Column)
	})
	return nil, all
}

func underAny(path string, errs config.Errors) bool {
	for _, e := range errs {
		if e.Path != "" && (path == e.Path || strings.HasPrefix(path, e.Path+".") || strings.HasPrefix(path, e.Path+"[")) {
			return true
		}
	}
	return false
}

func validURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, found %q", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("no host in %q", s)
	}
	if u.User != nil {
		return fmt.Errorf("credentials in the URL; name an api_key_env instead")
	}
	return nil
}
