// Package gateway is oncegate's request path and the router that mounts
// everything else (docs/architecture.md): a request for an answer passes
// admit → identify → place → attempts → relay → settle, one file each
// (path.go), with the retry engine driving every attempt and the
// streaming boundary in relay.go. The other surfaces — conversations,
// token counts, the read and admin APIs, readiness — are packages of
// their own, mounted in routes() through the small interfaces they
// declare (requestpath.go, mount_admin.go); background work runs as jobs
// (internal/jobs) this package starts and stops.
package gateway

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/budget"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/drain"
	"github.com/oncegate/oncegate/internal/health"
	"github.com/oncegate/oncegate/internal/httpfront"
	"github.com/oncegate/oncegate/internal/jobs"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/logline"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/receipt"
	"github.com/oncegate/oncegate/internal/recovery"
	"github.com/oncegate/oncegate/internal/tokencount"
	"github.com/oncegate/oncegate/internal/tracing"
)

// Options configure a Gateway. Zero values take the defaults named.
type Options struct {
	// Clock tells time (default: the system clock).
	Clock clock.Clock
	// Dial, when set, opens every connection to providers instead of the
	// system's network (tests use an in-memory one).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TokenAuthority, when set, is where providers that obtain Microsoft
	// Entra ID tokens (azure-openai with auth: entra) get them instead of
	// the cloud's: tests use the mock's. Nil: the cloud's.
	TokenAuthority *provider.TokenAuthority
	// Logger receives the gateway's own events (default: discard).
	Logger *slog.Logger
	// AccessLog receives one line per HTTP exchange (docs/operations.md,
	// "Logs"); default: Logger's handler, through slog — slower.
	AccessLog *logline.Writer
	// Ledger is the idempotency ledger, event log and receipt store
	// (default: an in-memory ledger, which nothing outlives). The caller
	// closes it after the gateway.
	Ledger ledger.Store
	// Reload, when set, re-reads the configuration and swaps it in
	// (Gateway.Reload): POST /v1/admin/reload calls it, as SIGHUP does.
	Reload func() error
	// Tracer, when set, records a span per logical request and per
	// attempt (serve sets it from telemetry.otlp_endpoint).
	Tracer trace.Tracer
	// DrainTimeout bounds graceful shutdown (default: the configuration's
	// drain_timeout).
	DrainTimeout time.Duration
	// Lease is how long an owner's claim on a request lasts between
	// renewals (default: the configuration's lease.ttl).
	Lease time.Duration
	// LeaseRenew is how often the claims are renewed (default: the
	// configuration's lease.renew, or a third of Lease when Lease is set).
	LeaseRenew time.Duration
	// RejoinGrace is how long a request whose caller can come back (a
	// keyed request, an official SDK) survives its last client (default 5s).
	RejoinGrace time.Duration
	// Secret is the fingerprint HMAC secret (default: the configured one,
	// else the ledger's, else random for this process).
	Secret []byte
	// Breakers are the routes' circuit breakers (default: in this process,
	// configured by the policy's breaker section).
	Breakers breaker.Admitter
	// RetryBudget is the fleet retry budget (default: in this process, the
	// policy's retry_budget).
	RetryBudget breaker.Retries
	// Tenants enforce tenant rates and cost ceilings (default: in this
	// process, each tenant's budget).
	Tenants quota.Ceiling
	// KeyLimits enforce the virtual keys' own limits (default: in this
	// process); KeyFeed, when set, tells the other replicas which keys
	// changed, and this one what changed elsewhere (docs/keys-and-teams.md).
	KeyLimits keyring.Limits
	KeyFeed   keyring.Feed
	// TenantSpans enforce the tenants' month and lifetime cost ceilings,
	// by tenant id (default: in this process, seeded from the store).
	TenantSpans quota.Spans
	// AlertsOnce decides which replica sends a budget alert (the Redis
	// coordination); nil: the store remembers what this gateway sent.
	AlertsOnce alerts.Once
	// BudgetWebhook's non-zero Client, Queue, Tries and Backoff replace
	// the budget webhook's defaults; its URL and secret come from the
	// configuration (alerts.budget_webhook).
	BudgetWebhook alerts.WebhookConfig
	// Load is the routes' load that a tier's strategy chooses by
	// (docs/routing.md): attempts in flight, time to first token and
	// rate-limit headroom (default: this process's view alone; replicas
	// share theirs through the coordination).
	Load *load.Table
	// Metrics receives the gateway's metrics (default: a registry of its
	// own, served at /metrics).
	Metrics *metrics.Metrics
	// Owner is this gateway's id: the owner of the ledger records it
	// claims, by which other replicas reach it (default: a new UUIDv7).
	Owner string
	// Flights places arrivals among the requests in flight (default: this
	// process's table, coord.Local). A Flights that also implements
	// Remotes relays flights other gateways own to the clients that
	// joined them here.
	Flights Flights
	// Coordination, when set, is the shared coordination whose health
	// /readyz reports and whose outage turns refusals into 503
	// coordination_unavailable.
	Coordination Health
	// Lookup reads the environment for what providers take from it
	// (cloud credentials, docs/providers.md); default os.LookupEnv.
	Lookup func(string) (string, bool)
	// MetricsListen, when set, is the address serving /metrics with no
	// key (serve --metrics-listen), over the configuration's
	// metrics_listen: the API port then does not serve /metrics without
	// the admin key either, and says where it is.
	MetricsListen string
}

// Flights places each arrival: the owner of a new flight, or a joiner of
// the one in flight for its identity (docs/identity.md, docs/replicas.md). *coord.Local
// does it in one process; the Redis coordinator across replicas.
type Flights interface {
	Place(ctx context.Context, a coord.Arrival) (coord.Place, error)
}

// Remotes subscribes to flights other gateways own.
type Remotes interface {
	Watch(ctx context.Context, identity string, r coord.Remote, clientRetries int) (coord.Subscription, error)
	// OwnerAlive reports whether the gateway owner is running; an error
	// when that cannot be told now.
	OwnerAlive(ctx context.Context, owner string) (bool, error)
	// Saw records, best effort, that a client here was relayed emitted
	// visible events of a request whose owner stopped before its end;
	// Seen returns that evidence for recovery's receipts.
	Saw(requestID string, emitted int64)
	Seen(ctx context.Context, requestIDs []string) (map[string]coord.Seen, error)
}

// Health is a shared part's availability.
type Health interface {
	// Err is nil while the part answers, the reason while it does not.
	Err() error
	// Ping asks the part now.
	Ping(ctx context.Context) error
}

// pinger is h as a health.Pinger, nil when nothing is shared.
func pinger(h Health) health.Pinger {
	if h == nil {
		return nil
	}
	return h
}

// Gateway serves the API. It is safe for concurrent use.
type Gateway struct {
	// cur is what the configuration decides, swapped whole by Reload.
	cur atomic.Pointer[live]
	// running counts each tenant's requests in progress (tenant id →
	// *atomic.Int64), for budget.max_concurrent.
	running     sync.Map
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	authority   *provider.TokenAuthority
	lookup      func(string) (string, bool) // the environment (Options.Lookup)
	ledger      ledger.Store
	flights     Flights
	remotes     Remotes // nil: no other gateways
	coordHealth Health  // nil: nothing shared
	clock       clock.Clock
	log         *slog.Logger
	access      *logline.Writer
	drain       time.Duration
	lease       time.Duration
	leaseRenew  time.Duration
	rejoinGrace time.Duration
	owner       string
	secret      []byte
	breakers    breaker.Admitter
	budget      breaker.Retries
	tenants     quota.Ceiling
	// costs are the tenants' cost ceilings (day, month, lifetime).
	costs *budget.Tenants
	keys  *keyring.Ring
	// budgets keeps the budget gauges and sends the budget alerts.
	budgets *alerts.Watcher
	webhook *alerts.Webhook // nil: no budget webhook
	load    *load.Table
	metrics *metrics.Metrics
	// reload re-reads the configuration (Options.Reload).
	reload func() error
	// metricsElsewhere: metrics_listen serves /metrics with no key.
	metricsElsewhere bool
	// tracer makes the spans of requests and attempts (a no-op one when
	// no telemetry is configured).
	tracer tracing.Tracer
	// metricsHTTP serves the Prometheus text, made once.
	metricsHTTP http.Handler
	// draining is set when the drain begins: /readyz says not ready.
	draining atomic.Bool
	// gate counts the requests being served and refuses new ones once
	// the drain has begun (Handler).
	gate     *drain.Gate
	gateOnce sync.Once
	mux      *http.ServeMux
	inflight sync.WaitGroup
	// recovery settles the requests whose owners are gone.
	recovery *recovery.Recovery
	// jobs runs the background work (startJobs) until Close.
	jobs *jobs.Runner
	// giveUp is the job that gives up abandoned leases; a claim that
	// meets one of this gateway's runs it at once.
	giveUp jobs.Job
	// live are the calls this process owns, by request id: their leases
	// are renewed while they run.
	live sync.Map
	// abandoned holds the request ids (keys; values unused) of calls that
	// ended without a terminal because the store failed: their leases are
	// given up as soon as the store answers, so that every gateway settles
	// them and answers alike (docs/replicas.md).
	abandoned sync.Map
	// store tracks whether the store answers, to say so once in the log.
	store health.Outage
}

type tenantKey struct {
	key    []byte
	tenant *policy.Tenant
}

// New builds a gateway for a compiled policy and its resolved secrets. With
// a ledger it first recovers what a previous process left unfinished.
func New(pol *policy.Policy, secrets *config.Secrets, opts Options) (*Gateway, error) {
	g := &Gateway{dial: opts.Dial, authority: opts.TokenAuthority, ledger: opts.Ledger, lookup: opts.Lookup,
		clock: opts.Clock, log: opts.Logger, drain: opts.DrainTimeout, lease: opts.Lease, rejoinGrace: opts.RejoinGrace,
		flights: opts.Flights, owner: opts.Owner, coordHealth: opts.Coordination, jobs: jobs.NewRunner()}
	if g.owner == "" {
		g.owner = uuid.Must(uuid.NewV7()).String()
	}
	if g.lookup == nil {
		g.lookup = os.LookupEnv
	}
	if g.flights == nil {
		g.flights = coord.NewLocal(int(pol.Limits.MaxStreamBufferBytes))
	}
	g.remotes, _ = g.flights.(Remotes)
	switch {
	case opts.LeaseRenew > 0:
		g.leaseRenew = opts.LeaseRenew
	case g.lease > 0:
		g.leaseRenew = g.lease / 3
	default:
		g.leaseRenew = pol.Config.Lease.Renew.D()
	}
	if g.lease == 0 {
		g.lease = pol.Config.Lease.TTL.D()
	}
	if g.lease <= 0 || g.leaseRenew <= 0 { // a policy compiled without defaults
		g.lease, g.leaseRenew = 30*time.Second, 10*time.Second
	}
	if g.rejoinGrace == 0 {
		g.rejoinGrace = 5 * time.Second
	}
	if g.clock == nil {
		g.clock = clock.System{}
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.access = opts.AccessLog; g.access == nil {
		g.access = logline.ForHandler(g.log.Handler())
	}
	g.store.Log = g.log
	if g.ledger == nil {
		g.ledger = memory.New(0)
	}
	if g.drain == 0 {
		g.drain = pol.Config.DrainTimeout.D()
	}
	if g.drain <= 0 { // a policy compiled without defaults
		g.drain = 30 * time.Second
	}
	g.guards(pol, opts)
	g.metricsHTTP = g.metrics.Handler()
	// What requests left in progress reserved matters only under a
	// daily ceiling; without one, start-up does not read them.
	ceiling := slices.ContainsFunc(pol.Tenants, func(t *policy.Tenant) bool { return t.CostPerDay+t.CostPerMonth+t.CostTotal > 0 })
	if err := g.costs.Seed(context.Background(), ceiling); err != nil {
		return nil, err
	}
	if rk, ok := g.tenants.(jobs.RateKeeper); ok {
		jobs.RestoreRates(context.Background(), g.ledger, rk, g.log)
	}
	g.metricsElsewhere, g.reload = pol.Config.MetricsListen != "" || opts.MetricsListen != "", opts.Reload
	g.tracer = tracing.New(opts.Tracer)
	l, err := g.newLive(pol, secrets, nil)
	if err != nil {
		return nil, err
	}
	g.cur.Store(l)
	g.recovery = &recovery.Recovery{Store: g.ledger, Clock: g.clock, Log: g.log, Policy: g.policy,
		Charged: func(ctx context.Context) error { return g.costs.Seed(ctx, false) }}
	if g.remotes != nil {
		g.recovery.Seen = g.remotes.Seen
	}
	if err := g.initSecret(opts.Secret, secrets.GatewaySecret); err != nil {
		return nil, err
	}
	g.keys = keyring.New(g.ledger, g.clock, g.log, g.metrics, g.secret, g.policy, opts.KeyLimits, opts.KeyFeed)
	g.keys.OnTeams(g.setTenantLimits)
	g.watchBudgets(pol, secrets, opts)
	g.routes()
	n, err := g.recovery.SettleLapsed(context.Background())
	if err != nil {
		return nil, fmt.Errorf("recover unfinished requests: %w", err)
	}
	if n > 0 {
		g.log.Warn("recovered unfinished requests whose owners are gone", "count", n)
	}
	g.giveUp = jobs.GiveUp(g.ledger, g.clock, g.owner, abandonedLeases{g})
	g.startJobs()
	return g, nil
}

// guards sets up the overload protection of docs/overload.md: the options' or
// in-process breakers, retry budget and tenant limits, and the metrics.
func (g *Gateway) guards(pol *policy.Policy, opts Options) {
	g.breakers, g.budget, g.tenants, g.metrics = opts.Breakers, opts.RetryBudget, opts.Tenants, opts.Metrics
	if g.breakers == nil {
		g.breakers = breaker.NewSet(pol.BreakerConfig(), g.clock, pol.RouteIDs())
	}
	if g.budget == nil {
		g.budget = breaker.NewBudget(pol.BudgetConfig(), g.clock)
	}
	if g.tenants == nil {
		g.tenants = quota.New(g.clock, pol.TenantLimits())
	}
	g.costs = &budget.Tenants{Day: g.tenants, Spans: opts.TenantSpans, Store: g.ledger, Clock: g.clock}
	g.costs.Spans.Fill(g.clock)
	g.costs.Spans.SetCosts(pol.TenantCosts())
	if g.load = opts.Load; g.load == nil {
		g.load = load.New(g.clock, pol.LoadLimits())
	}
	if g.metrics == nil {
		g.metrics = metrics.New(nil)
	}
	g.metrics.RegisterRouteLoad(g.load.InFlights)
	if r, ok := g.ledger.(refusingStore); ok {
		g.metrics.RegisterLedgerRefused(r.Refused)
	}
	if bs, ok := g.breakers.(breaker.StateLister); ok {
		g.metrics.RegisterBreakers(func(f func(string, int, int64)) {
			bs.States(func(route string, st breaker.State, gen int64) { f(route, int(st), gen) })
		})
	}
}

// refusingStore is a store that counts the writes it acknowledged and
// its database then refused (a SQLite ledger written through its intent
// log; docs/durability.md).
type refusingStore interface{ Refused() int }

func (g *Gateway) initSecret(opt []byte, configured string) error {
	switch {
	case len(opt) > 0:
		g.secret = opt
	case configured != "":
		g.secret = []byte(configured)
	default:
		s, err := g.ledger.Secret(context.Background())
		if err != nil {
			return fmt.Errorf("fingerprint secret: %w", err)
		}
		g.secret = s
	}
	return nil
}

// startJobs starts the background work (docs/architecture.md,
// "Background jobs"): lease renewal, giving up abandoned leases, recovery
// of lapsed requests, retention, and keeping the tenants' rates.
func (g *Gateway) startJobs() {
	if rk, ok := g.tenants.(jobs.RateKeeper); ok {
		g.jobs.Start(jobs.SaveRates(g.ledger, rk, g.log))
	}
	g.jobs.Start(jobs.Renewal(g.ledger, g.clock, g.log, g.owner, g.lease, g.leaseRenew, heldLeases{g}))
	g.jobs.Start(g.giveUp)
	g.jobs.Start(jobs.Job{Name: "recovery", Every: jobs.Fixed(g.lease / 2), Run: g.settleLapsed})
	g.jobs.Start(jobs.Retention(g.ledger, g.clock, g.log, g.policy))
	g.startBudgetJobs()
}

// heldLeases are the requests whose calls this gateway runs.
type heldLeases struct{ g *Gateway }

func (h heldLeases) Each(f func(id string)) {
	h.g.live.Range(func(k, _ any) bool { f(k.(string)); return true })
}

func (h heldLeases) Lost(id string) {
	if v, ok := h.g.live.Load(id); ok {
		v.(*call).loseLease()
	}
}

// abandonedLeases are the requests whose calls this gateway abandoned.
type abandonedLeases struct{ g *Gateway }

func (a abandonedLeases) Each(f func(id string)) {
	a.g.abandoned.Range(func(k, _ any) bool { f(k.(string)); return true })
}

func (a abandonedLeases) Forget(id string) { a.g.abandoned.Delete(id) }

// settleLapsed settles, now and then, the requests whose owners' leases
// lapsed: another gateway sharing the store died, or a call of this one
// ended without a terminal (its store was unreachable). Nothing is ever
// re-dispatched: a request with an attempt in flight becomes
// indeterminate (docs/replicas.md).
func (g *Gateway) settleLapsed(ctx context.Context) {
	if n, err := g.recovery.SettleLapsed(ctx); err != nil {
		g.log.Error("settle lapsed requests", "err", err)
	} else if n > 0 {
		g.log.Warn("settled requests whose owners' leases lapsed", "count", n)
	}
}

func (g *Gateway) routes() {
	m := http.NewServeMux()
	cv := g.conversations()
	m.HandleFunc("POST /v1/chat/completions", g.serveChat(provider.OpenAI))
	m.HandleFunc("POST /v1/messages", g.serveChat(provider.Anthropic))
	m.HandleFunc("POST /v1/responses", cv.ServeResponses)
	m.HandleFunc("POST /v1/embeddings", g.serveChat(provider.Embeddings))
	m.HandleFunc("GET /v1/responses/{id}", g.authed(cv.ServeResponse))
	m.HandleFunc("DELETE /v1/responses/{id}", g.authed(cv.DeleteResponse))
	m.HandleFunc("GET /v1/responses/{id}/input_items", g.authed(cv.ServeInputItems))
	m.Handle("POST /v1/messages/count_tokens", tokencount.New(requestPath{g}, g.breakers, g.metrics, g.log))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	m.Handle("GET /readyz", &health.Ready{Store: g.ledger, Coordination: pinger(g.coordHealth), Draining: g.draining.Load, Detailed: g.isAdmin, Log: g.log})
	m.HandleFunc("GET /metrics", g.serveMetrics)
	m.HandleFunc("POST /v1/admin/reload", g.serveReload)
	g.readAPI().Mount(m)
	g.adminAPI().Mount(m)
	// Every other answer is an error in the caller's protocol too: an
	// unknown path (404 not_found), a known one with another method (405).
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/messages": "POST",
		"/v1/responses": "POST", "/v1/embeddings": "POST",
		"/v1/messages/count_tokens": "POST", "/v1/responses/{id}": "GET, DELETE", "/v1/responses/{id}/input_items": "GET",
		"/healthz": "GET", "/readyz": "GET", "/metrics": "GET"} {
		m.HandleFunc(path, methodNotAllowed(allow))
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		api.Errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path).Write(w, protocolOf(r), api.Meta{})
	})
	g.mux = m
}

// serveMetrics serves /metrics on the API port to the admin key only: the
// metrics show every tenant's spend. Without an admin key they are not
// served there at all.
func (g *Gateway) serveMetrics(w http.ResponseWriter, r *http.Request) {
	p := protocolOf(r)
	switch {
	case g.cur.Load().adminKey == "" && g.metricsElsewhere:
		api.Errorf(api.CodeNotFound, "/metrics is served on the metrics_listen address, not on the API port").Write(w, p, api.Meta{})
	case g.cur.Load().adminKey == "":
		api.Errorf(api.CodeNotFound, "/metrics is not served on the API port without an admin key: set admin_key_env (or admin_key_file), or metrics_listen").Write(w, p, api.Meta{})
	case !g.isAdmin(r):
		api.Errorf(api.CodeUnauthorized, "/metrics needs the admin key (admin_key_env or admin_key_file)").Write(w, p, api.Meta{})
	default:
		g.metricsHTTP.ServeHTTP(w, r)
	}
}

// isAdmin reports whether a request carries the admin key.
func (g *Gateway) isAdmin(r *http.Request) bool {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key == "" {
		key = cmp.Or(r.Header.Get("x-api-key"), r.Header.Get("api-key"))
	}
	return g.cur.Load().adminKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(g.cur.Load().adminKey)) == 1
}

// MetricsHandler serves /metrics with no key: for the metrics_listen
// address, which the operator keeps private.
func (g *Gateway) MetricsHandler() http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", g.metricsHTTP)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return m
}

// methodNotAllowed answers a known path asked with another method.
func methodNotAllowed(allow string) http.HandlerFunc { return api.MethodNotAllowed(allow) }

// Close stops the background work and releases upstream connections. The
// ledger is the caller's to close.
func (g *Gateway) Close() {
	g.jobs.Stop()
	for _, c := range g.cur.Load().clients {
		c.Close()
	}
}

// Handler is the gateway's whole HTTP surface behind its drain gate:
// what Serve serves, for a caller that serves it itself or calls it in
// process (the library, docs/library.md). Every call returns the same
// gate, so Drain stops every server of it at once.
func (g *Gateway) Handler() http.Handler {
	g.gateOnce.Do(func() { g.gate = drain.NewGate(g, g.refuseDraining) })
	return g.gate
}

// Drain begins the graceful stop (docs/operations.md, "Stopping"):
// /readyz answers 503 draining, new requests are refused (503 draining,
// x-should-retry: true), and it waits until the requests and streams in
// flight — and the work they left running — have finished, or ctx ends
// (false). It may be called more than once.
func (g *Gateway) Drain(ctx context.Context) bool {
	if !g.draining.Swap(true) { // not ready from the first moment of the drain
		g.log.Info("draining", "timeout", g.drain.String())
	}
	return g.Handler().(*drain.Gate).Drain(ctx) && g.runsFinish(ctx)
}

// DrainTimeout is how long a drain waits for the requests in flight
// (Options.DrainTimeout, else the configuration's drain_timeout).
func (g *Gateway) DrainTimeout() time.Duration { return g.drain }

// Serve runs the gateway on ln until ctx ends, then drains (Drain) for up
// to the drain timeout, and the requests still in flight are cut. The
// listener stays open until the drain ends, so a load balancer's health
// probes are answered throughout.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpfront.Listener{Listener: ln}) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	srv.SetKeepAlivesEnabled(false)
	dctx, cancel := context.WithTimeout(context.Background(), g.drain)
	defer cancel()
	drained := g.Drain(dctx)
	if drained {
		err := srv.Shutdown(dctx)
		drained = !errors.Is(err, context.DeadlineExceeded)
	}
	if !drained {
		g.log.Warn("drain timeout: closing remaining connections", "timeout", g.drain)
		_ = srv.Close()
	}
	g.inflight.Wait()
	return nil
}

// runsFinish waits until the logical requests this process runs have
// finished, or ctx ends (false). No handler is running when it is
// called, so none can start another.
func (g *Gateway) runsFinish(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// tenant authenticates a request: "Authorization: Bearer KEY" (OpenAI SDK),
// "x-api-key: KEY" (Anthropic SDK) or "api-key: KEY" (Azure OpenAI SDK).
// Keys compare in constant time.
func (g *Gateway) tenant(r *http.Request) *policy.Tenant {
	key := cmp.Or(r.Header.Get("x-api-key"), r.Header.Get("api-key"))
	if a := r.Header.Get("Authorization"); key == "" && len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		key = strings.TrimSpace(a[7:])
	}
	if key == "" {
		return nil
	}
	var found *policy.Tenant
	for _, k := range g.cur.Load().keys {
		if subtle.ConstantTimeCompare(k.key, []byte(key)) == 1 {
			found = k.tenant
		}
	}
	var lk *keyring.Key
	if found == nil {
		found, lk = g.virtualTenant(r.Context(), key)
	}
	if found != nil {
		accesslog.Of(r.Context()).Set(func(a *accesslog.Entry) { a.Tenant, a.Key = found.ID, lk })
	}
	return found
}

// protocolOf picks the error shape for endpoints shared by both SDKs.
func protocolOf(r *http.Request) provider.Protocol { return api.ProtocolOf(r) }

func (g *Gateway) authed(h func(http.ResponseWriter, *http.Request, *policy.Tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := g.tenant(r)
		if t == nil {
			api.Errorf(api.CodeUnauthorized, "missing or unknown API key").Write(w, protocolOf(r), api.Meta{})
			return
		}
		h(w, r, t)
	}
}

// receipt loads one of the tenant's receipts.
func (g *Gateway) receipt(ctx context.Context, tenant, id string) (*receipt.Receipt, error) {
	body, err := g.ledger.Receipt(ctx, tenant, id)
	if errors.Is(err, ledger.ErrNotFound) {
		// A request recovery settled whose receipt is not rebuilt yet.
		return g.recovery.Receipt(ctx, tenant, id)
	}
	if err != nil {
		return nil, err
	}
	return receipt.Parse(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) { api.WriteJSON(w, status, v) }
