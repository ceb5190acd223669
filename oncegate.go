// Package oncegate is the oncegate LLM gateway as a Go library: the retry
// owner in your own process, with every guarantee `oncegate serve` gives
// (docs/library.md). serve itself is a thin user of this package.
//
// One user action becomes one logical request, a bounded and recorded
// set of attempts, at most one committed answer and one receipt — through
// provider outages, dropped streams, re-sent requests and crashes.
//
// # Opening
//
// Open a Gateway from the same configuration file `serve` reads
// (docs/configuration.md; Options.Config takes the YAML itself). Open
// checks it as `oncegate check` does and every error names what is
// wrong; Options override the store, the coordination and where secrets
// are read from (Options.Env), and attach a logger, an access log and a
// tracer.
//
//	gw, err := oncegate.Open(ctx, oncegate.Options{ConfigFile: "oncegate.yaml"})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer gw.Close() // drains the requests in flight, like SIGTERM
//
// # Calling it in process
//
// HTTPClient returns an *http.Client that hands each request to the
// gateway in this process, with no socket: give it to the official
// OpenAI or Anthropic SDK with any host in the base URL, and the SDK's
// own retries off.
//
//	client := openai.NewClient(
//		option.WithBaseURL("http://oncegate/v1/"),
//		option.WithHTTPClient(gw.HTTPClient("sk-tenant-key")),
//		option.WithMaxRetries(0), // the gateway owns retries
//	)
//
// The gateway retries, falls back and resumes within the request's
// deadline; an SDK retry on top would be joined to the same logical
// request (it cannot make a second generation) but costs a round trip
// and hides the bound. The answer of a logical request carries its id in
// X-Oncegate-Request-Id, and its receipt, every attempt listed, is GET
// /v1/receipts/{id} through HTTPClient(adminKey) or Handler. The same
// request re-sent with the same Idempotency-Key joins the first while it
// runs and replays its answer after — across goroutines, replicas and,
// with a ledger on disk, restarts.
//
// A call in process costs less CPU than the same call to `serve` over
// loopback, client and gateway counted together: `go run ./bench
// -library` measures it (docs/library.md has the numbers).
//
// # Serving it
//
// Handler is the whole HTTP surface `serve` answers — the OpenAI and
// Anthropic APIs, receipts, admin, console, metrics, probes — to mount in
// your own server or mux; Serve runs it on a listener.
//
// # Operating it
//
// Reload reads the configuration file again, as SIGHUP does to `serve`
// (POST /v1/admin/reload with the admin key calls it too). Metrics are
// the oncegate_* Prometheus series (docs/operations.md, "Metrics"):
// MetricsHandler serves them with no key, for a private port; Handler
// serves them at /metrics to the admin key only. Options.Tracer records
// a span per logical request and per attempt; Options.Logger receives
// the gateway's events, and Options.AccessLog (or else the Logger) one
// line per HTTP exchange.
//
// # Replicas
//
// With Options.Store "postgres://…" and Options.Coordination
// "redis://…", a Gateway is one replica of a fleet that `serve`
// processes may be part of: the same request sent to two replicas is one
// generation (docs/replicas.md). ID is its name among them.
//
// # Closing
//
// Close drains like SIGTERM: new requests are refused with 503 draining,
// those in flight and their streams finish for up to the drain timeout,
// then the ledger and coordination close. A ledger on disk keeps every
// receipt; a Gateway opened again on it recovers what was left
// unfinished.
//
// Nothing under internal/ needs importing.
package oncegate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/logline"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/replica"
	"github.com/oncegate/oncegate/internal/storeopen"
)

// Options say how to open a Gateway. Exactly one of ConfigFile and Config
// is required.
type Options struct {
	// ConfigFile is the path of the configuration (docs/configuration.md),
	// read at Open and again by Reload.
	ConfigFile string
	// Config is the configuration itself, when it is not in a file
	// (Reload then has nothing to read). Relative paths in it
	// (api_key_file, sqlite://) are relative to the working directory.
	Config []byte
	// Env, when not nil, is the whole environment the configuration's
	// *_env names and the providers' credentials are read from, instead
	// of the process's own (a test, or a service that keeps its secrets
	// elsewhere).
	Env map[string]string
	// Store, when set, is the ledger to use instead of the
	// configuration's store: sqlite://PATH, postgres://… or memory://.
	Store string
	// Coordination, when set, replaces the configuration's coordination:
	// local, or redis://… to be one replica of a fleet (with a postgres
	// store), which `serve` processes may be part of.
	Coordination string
	// Logger receives the gateway's events — start, reloads, warnings,
	// recovery — and, unless AccessLog is set, its access log (default:
	// discarded). The configuration's log.level and log.format apply
	// to AccessLog only; the Logger's handler decides its own.
	Logger *slog.Logger
	// Tracer, when set, records a server span per logical request (a
	// child of the caller's trace when the request carried a
	// traceparent) and a client span per attempt under it, whose context
	// is sent to the provider (docs/operations.md, "Traces"). Its
	// provider's export and shutdown are the caller's. Default: no spans,
	// at no cost.
	Tracer trace.Tracer
	// Clock, when set, is the time the gateway reads (tests); default the
	// system's.
	Clock interface{ Now() time.Time }
	// DrainTimeout, when set, replaces the configuration's drain_timeout:
	// how long Close waits for the requests in flight.
	DrainTimeout time.Duration
	// AccessLog, when set, receives one line per HTTP exchange —
	// method, path, status, request id, tenant, model, attempts, routes,
	// tokens, cost, terminal — in the configuration's log.format and at
	// its log.level (docs/operations.md, "Logs"), written without slog's
	// work per field: one Write per line, from many goroutines at once,
	// so it must be safe for concurrent use (an *os.File is). Default:
	// through Logger.
	AccessLog io.Writer
	// MetricsListen, when set, replaces the configuration's
	// metrics_listen: the address where the caller serves MetricsHandler
	// (Open listens on nothing). Handler's /metrics stays the admin
	// key's; a gateway with no admin key then answers there that the
	// metrics are served on metrics_listen.
	MetricsListen string
}

// Gateway is an open gateway: its ledger, coordination and providers,
// and the requests in flight. It is safe for concurrent use. Close it to
// drain and release them.
type Gateway struct {
	gw       *gateway.Gateway
	owner    string
	path     string
	lookup   func(string) (string, bool)
	closers  []func() error // in the order they run at Close
	closeErr error
	once     sync.Once
	running  handlers // the in-process requests (HTTPClient) being served
}

// Open validates the configuration (as `oncegate check` does), opens its
// ledger and, with a redis:// coordination, joins the fleet; it then
// recovers what an earlier process left unfinished in the ledger. Every
// error names what was wrong.
func Open(ctx context.Context, o Options) (*Gateway, error) {
	lookup := os.LookupEnv
	if o.Env != nil {
		lookup = func(k string) (string, bool) { v, ok := o.Env[k]; return v, ok }
	}
	pol, secrets, err := load(o, lookup)
	if err != nil {
		return nil, err
	}
	storeURL, coordURL := pol.Config.Store, pol.Config.Coordination
	if o.Store != "" {
		storeURL = o.Store
	}
	if o.Coordination != "" {
		coordURL = o.Coordination
	}
	shared := policy.IsRedis(coordURL)
	switch {
	case coordURL != "local" && !shared:
		return nil, fmt.Errorf("oncegate: coordination %q: want local or redis://…", coordURL)
	case shared && !policy.IsPostgres(storeURL):
		return nil, fmt.Errorf("oncegate: coordination %s shares state between gateways, but store %s can be opened by one process only: use postgres://…",
			redis.Redact(coordURL), storeURL)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{path: o.ConfigFile, lookup: lookup}
	store, err := storeopen.Open(ctx, storeURL, pol.Config.Ledger.Sync, false, logWriter{log})
	if err != nil {
		return nil, fmt.Errorf("oncegate: %w", err)
	}
	if r, ok := store.(interface{ Refused() int }); ok && r.Refused() > 0 {
		log.Warn("the ledger's intent log held records the database refused; they are set aside in its meta table (docs/durability.md)",
			"records", r.Refused())
	}
	opts := gateway.Options{Logger: log, Ledger: store, Tracer: o.Tracer, DrainTimeout: o.DrainTimeout, Lookup: lookup, MetricsListen: o.MetricsListen}
	if o.AccessLog != nil {
		var level slog.Level
		_ = level.UnmarshalText([]byte(pol.Config.Log.Level)) // checked with the configuration
		opts.AccessLog = logline.New(o.AccessLog, pol.Config.Log.Format, level)
	}
	if o.Clock != nil {
		opts.Clock = o.Clock
	}
	if g.path != "" {
		opts.Reload = g.Reload
	}
	opts.Owner = uuid.Must(uuid.NewV7()).String()
	g.owner = opts.Owner
	closers := []func() error{store.Close}
	if shared {
		co, err := replica.Share(ctx, pol, coordURL, store, log, &opts)
		if err != nil {
			_ = store.Close()
			return nil, fmt.Errorf("oncegate: %w", err)
		}
		closers = append([]func() error{func() error { co.Close(); return nil }}, closers...)
	}
	gw, err := gateway.New(pol, secrets, opts)
	if err != nil {
		for _, c := range closers {
			_ = c()
		}
		return nil, fmt.Errorf("oncegate: %w", err)
	}
	g.gw = gw
	g.closers = append([]func() error{func() error { gw.Close(); return nil }}, closers...)
	log.Info("open", "policy", pol.Digest[:12], "gateway", g.owner, "models", len(pol.Aliases), "tenants", len(pol.Tenants))
	return g, nil
}

// load reads and checks the configuration o names, and its secrets.
func load(o Options, lookup func(string) (string, bool)) (*policy.Policy, *config.Secrets, error) {
	var pol *policy.Policy
	var err error
	switch {
	case o.ConfigFile != "" && o.Config != nil:
		return nil, nil, errors.New("oncegate: Options.ConfigFile and Options.Config are both set: give one")
	case o.ConfigFile != "":
		pol, err = policy.Load(o.ConfigFile)
	case o.Config != nil:
		pol, err = policy.Parse("Options.Config", o.Config)
	default:
		return nil, nil, errors.New("oncegate: no configuration: set Options.ConfigFile or Options.Config")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("oncegate: %w", err)
	}
	secrets, err := pol.Config.ResolveSecrets(lookup)
	if err != nil {
		return nil, nil, fmt.Errorf("oncegate: %w", err)
	}
	return pol, secrets, nil
}

// Handler is the gateway's whole HTTP surface — the OpenAI and Anthropic
// APIs, receipts, admin, console, metrics and probes — exactly as `serve`
// answers it, for serving from your own server or mux. Once Close has
// begun, it refuses new requests with 503 draining.
func (g *Gateway) Handler() http.Handler { return g.gw.Handler() }

// MetricsHandler serves the gateway's Prometheus metrics at GET
// /metrics (and GET /healthz) with no key, for a private port: the
// oncegate_* series (docs/operations.md, "Metrics") count every request,
// through HTTPClient as through Handler, beside the Go runtime's.
func (g *Gateway) MetricsHandler() http.Handler { return g.gw.MetricsHandler() }

// HTTPClient returns a client whose transport hands each request to the
// gateway in this process — no socket, no loopback — authenticated with
// apiKey (a tenant's key, a virtual key or the admin key) whatever
// credentials the request carries. Any host in the URL reaches the
// gateway: give an SDK a base URL such as http://oncegate/v1/. Streams
// are relayed as the gateway writes them, and a request's context
// cancels it in the gateway as a closed connection would.
func (g *Gateway) HTTPClient(apiKey string) *http.Client {
	return &http.Client{Transport: &inProcess{h: g.gw.Handler(), key: apiKey, running: &g.running}}
}

// Serve serves the gateway's HTTP surface on ln until ctx ends, then
// drains as Close does and returns. It does not close the gateway.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error { return g.gw.Serve(ctx, ln) }

// Reload reads the configuration file again and swaps it in whole, as
// SIGHUP does to `serve`: requests in flight finish on the old one. An
// invalid file changes nothing and Reload says why. A Gateway opened from
// Options.Config has no file to read again.
func (g *Gateway) Reload() error {
	if g.path == "" {
		return errors.New("oncegate: opened from Options.Config: there is no file to reload")
	}
	pol, secrets, err := load(Options{ConfigFile: g.path}, g.lookup)
	if err != nil {
		return err
	}
	return g.gw.Reload(pol, secrets)
}

// ID is this gateway's id, new at each Open: the owner its ledger
// records name, by which the other replicas of a fleet reach it.
func (g *Gateway) ID() string { return g.owner }

// Close drains the gateway like SIGTERM does to `serve` — new requests
// are refused with 503 draining, those in flight and their streams finish
// for up to the drain timeout — then stops its background work and
// closes its coordination and ledger. It is safe to call more than once.
func (g *Gateway) Close() error {
	g.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), g.gw.DrainTimeout())
		defer cancel()
		g.gw.Drain(ctx)
		g.running.cut() // what the drain's timeout left running
		var errs []error
		for _, c := range g.closers {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}

// logWriter writes the store's warnings (a SQLite reader behind) to the
// logger.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn(string(p))
	return len(p), nil
}

var _ io.Writer = logWriter{}
