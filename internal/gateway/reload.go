package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/registry"
	"github.com/oncegate/oncegate/internal/scrub"
	"github.com/oncegate/oncegate/internal/upstream"
)

// live is what the configuration decides at one moment: the policy
// (tenants, providers, routes, models), the keys, the provider clients and
// the secrets to scrub. A reload swaps it whole; a logical request keeps
// the alias, tenant and client it started with, so streams in flight
// finish on the policy they began under (docs/operations.md, "Reload").
type live struct {
	pol       *policy.Policy
	keys      []tenantKey
	clients   map[string]*upstreamClient
	scrub     *scrub.Scrubber // every configured secret, scrubbed from provider text
	adminKey  string          // reads /metrics on the API port ("" when none)
	logBodies bool
	// gatewaySecret is the configured fingerprint secret ("": the
	// store's): it cannot change while the process runs.
	gatewaySecret string
}

// policy is the configuration in force.
func (g *Gateway) policy() *policy.Policy { return g.cur.Load().pol }

// upstreamClient is one provider's client and the Endpoint its type
// opened (docs/providers.md): how each attempt is built, authenticated and
// read.
type upstreamClient struct {
	*upstream.Client
	ep provider.Endpoint
	// made is what it was made from: the provider's settings and
	// secrets. A reload that leaves them alone keeps the client, its
	// connections and its credential's cache.
	made string
}

// newLive builds the live configuration for a policy; prev's clients are
// reused for providers whose settings and secrets did not change.
func (g *Gateway) newLive(pol *policy.Policy, secrets *config.Secrets, prev *live) (*live, error) {
	l := &live{pol: pol, clients: map[string]*upstreamClient{}, scrub: scrub.New(scrub.SecretsOf(secrets)), adminKey: secrets.AdminKey,
		logBodies: pol.Config.Log.Bodies, gatewaySecret: secrets.GatewaySecret}
	for key, id := range secrets.TenantKeys {
		t := pol.Tenant(id)
		if t == nil {
			return nil, fmt.Errorf("secrets name unknown tenant %q", id)
		}
		l.keys = append(l.keys, tenantKey{key: []byte(key), tenant: t})
	}
	for _, p := range pol.Providers {
		made := madeFrom(p, secrets)
		if prev != nil {
			if c, ok := prev.clients[p.ID]; ok && c.made == made {
				l.clients[p.ID] = c
				continue
			}
		}
		c, err := openProvider(p, secrets, g.lookup, g.dial, g.authority)
		if err != nil {
			return nil, err
		}
		c.made = made
		l.clients[p.ID] = c
	}
	return l, nil
}

// openProvider opens p with its type (docs/providers.md) and makes its
// client: the endpoint's base URL and auth step, the provider's extra
// headers and query parameters.
func openProvider(p *policy.Provider, secrets *config.Secrets, lookup func(string) (string, bool),
	dial func(ctx context.Context, network, addr string) (net.Conn, error), authority *provider.TokenAuthority) (*upstreamClient, error) {
	ep, err := registry.Open(provider.Config{Provider: p.Config, APIKey: secrets.ProviderKeys[p.ID], Lookup: lookup, Authority: authority})
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.ID, err)
	}
	h := http.Header{}
	h.Set("User-Agent", "oncegate/1")
	for name, v := range secrets.ProviderHeaders[p.ID] {
		h.Set(name, v)
	}
	var q url.Values
	for name, v := range secrets.ProviderQuery[p.ID] {
		if q == nil {
			q = url.Values{}
		}
		q.Set(name, v)
	}
	cfg := upstream.Config{BaseURL: ep.BaseURL(), Connect: p.Connect, FirstByte: p.FirstByte, Idle: p.Idle, Headers: h, Query: q, Dial: dial}
	if a := ep.Auth(); a != nil {
		cfg.Auth = a
	}
	return &upstreamClient{Client: upstream.New(cfg), ep: ep}, nil
}

// madeFrom sums up what a provider's client is made from: its settings
// and its secrets (hashed: the sum is kept, never shown).
func madeFrom(p *policy.Provider, secrets *config.Secrets) string {
	cfg := *p.Config
	cfg.Headers, cfg.Query = nil, nil // their values, not their positions, count
	b, _ := json.Marshal(struct {
		Cfg            config.Provider
		Connect        time.Duration
		FirstByte      time.Duration
		Idle           time.Duration
		Key            string
		Headers, Query map[string]string
	}{cfg, p.Connect, p.FirstByte, p.Idle, secrets.ProviderKeys[p.ID], secrets.ProviderHeaders[p.ID], secrets.ProviderQuery[p.ID]})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// serveReload handles POST /v1/admin/reload (the admin key only):
// re-read the configuration file and swap it in, or say why not.
func (g *Gateway) serveReload(w http.ResponseWriter, r *http.Request) {
	p := protocolOf(r)
	switch {
	case !g.isAdmin(r):
		api.Errorf(api.CodeUnauthorized, "reloading needs the admin key (admin_key_env or admin_key_file)").Write(w, p, api.Meta{})
	case g.reload == nil:
		api.Errorf(api.CodeNotFound, "this gateway has no configuration file to reload").Write(w, p, api.Meta{})
	default:
		if err := g.reload(); err != nil {
			api.Errorf(api.CodeInvalidRequest, "the configuration was not reloaded: %v", err).Write(w, p, api.Meta{})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"reloaded": true, "policy_sha256": g.policy().Digest})
	}
}

// Reload swaps in a new configuration: tenants and their keys, providers
// and theirs, the admin key, routes and models, and the settings read
// per request. Secrets come as the caller read them now: a key kept in a
// file (api_key_file …) is rotated by a reload. It is validated
// whole first (by the caller, which compiled pol); what one process cannot
// change while it runs — the store, the coordination, the addresses, the
// lease, telemetry — must be as it was, or nothing changes. Requests in
// flight keep the configuration they started with.
func (g *Gateway) Reload(pol *policy.Policy, secrets *config.Secrets) error {
	old := g.cur.Load()
	a, b := old.pol.Config, pol.Config
	var fixed []string
	for _, f := range []struct {
		name string
		same bool
	}{{"store", a.Store == b.Store}, {"coordination", a.Coordination == b.Coordination}, {"listen", a.Listen == b.Listen},
		{"metrics_listen", a.MetricsListen == b.MetricsListen}, {"lease", a.Lease == b.Lease},
		{"telemetry", a.Telemetry == b.Telemetry}, {"alerts", a.Alerts == b.Alerts}, {"secret_env", a.SecretEnv == b.SecretEnv},
		{"secret_file", a.SecretFile == b.SecretFile}, {"the fingerprint secret (secret_file's content)", old.gatewaySecret == secrets.GatewaySecret},
		{"retry_budget", a.RetryBudget == b.RetryBudget}, {"breaker", a.Breaker == b.Breaker}} {
		if !f.same {
			fixed = append(fixed, f.name)
		}
	}
	if len(fixed) > 0 {
		return fmt.Errorf("%s cannot change while the gateway runs: restart it for that (nothing was reloaded)", strings.Join(fixed, ", "))
	}
	l, err := g.newLive(pol, secrets, old)
	if err != nil {
		return err
	}
	if r, ok := g.breakers.(interface{ AddRoutes([]string) }); ok {
		r.AddRoutes(pol.RouteIDs())
	}
	g.load.SetLimits(pol.LoadLimits())
	g.cur.Store(l)
	g.setTenantLimits() // the new policy's tenants, and the teams
	g.log.Info("configuration reloaded", "policy", pol.Digest[:12], "tenants", len(pol.Tenants), "models", len(pol.Aliases))
	return nil
}
