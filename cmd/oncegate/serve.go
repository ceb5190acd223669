package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncegate/oncegate"
	"github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/logsink"
	"github.com/oncegate/oncegate/internal/memtune"
	"github.com/oncegate/oncegate/internal/policy"
)

// serve runs the gateway until interrupted, then drains in-flight requests.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "--config FILE [--listen ADDR] [--metrics-listen ADDR] [--store URL] [--coordination URL]",
		"Run the gateway until SIGINT or SIGTERM, then drain the requests in flight: /healthz and /readyz (503 draining)\n"+
			"keep answering until they have finished. SIGHUP re-reads the configuration file and swaps it in (as\n"+
			"oncegate reload does): tenants, keys (those kept in files are read again), providers, routes and models.",
		configEnv+"\n  GOGC: the garbage collector's target (default here: 400 while little is alive, lowered as the live heap grows so that it runs at most limits.gc_headroom_bytes past it)\n  GOMEMLIMIT: a soft memory limit (default: limits.memory_bytes, else 90 % of the cgroup's limit)", stderr)
	path := fs.String("config", "", "configuration file (required)")
	listen := fs.String("listen", "", "address to listen on (default: the config's listen)")
	metricsListen := fs.String("metrics-listen", "", "address serving /metrics with no key, to keep private (default: the config's metrics_listen)")
	storeFlag := fs.String("store", "", "ledger to use (default: the config's store), e.g. sqlite:///var/lib/oncegate/ledger.db")
	coordFlag := fs.String("coordination", "", "coordination to use (default: the config's coordination), e.g. redis://127.0.0.1:6379/0")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file when the gateway stops (go tool pprof)")
	traceFile := fs.String("trace", "", "write an execution trace of the whole run to this file when the gateway stops (go tool trace)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	stopProfiles, err := startProfiles(*cpuProfile, *traceFile)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	defer stopProfiles()
	if *path == "" {
		fmt.Fprintln(stderr, "oncegate serve: --config FILE is required")
		return 2
	}
	pol, _, code := loadConfig(*path, stderr)
	if pol == nil {
		return code
	}
	// Log lines are gathered into few writes (docs/operations.md); the
	// last are written when serve returns.
	logOut := logsink.New(stderr)
	defer logOut.Close()
	log := newLogger(logOut, pol.Config.Log)
	mem := memtune.Start(os.LookupEnv, pol.Config.Limits.MemoryBytes, pol.Config.Limits.GCHeadroomBytes, "/sys/fs/cgroup")
	storeURL, coordURL := pol.Config.Store, pol.Config.Coordination
	if *storeFlag != "" {
		storeURL = *storeFlag
	}
	if *coordFlag != "" {
		coordURL = *coordFlag
	}
	if coordURL != "local" && !policy.IsRedis(coordURL) {
		fmt.Fprintf(stderr, "oncegate serve: coordination %q: want local or redis://… (redis+sentinel://…, redis+cluster://…)\n", coordURL)
		return 2
	}
	if policy.IsRedis(coordURL) {
		if _, err := redis.ParseURL(coordURL); err != nil {
			fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
			return 2
		}
	}
	metricsAddr := pol.Config.MetricsListen
	if *metricsListen != "" {
		metricsAddr = *metricsListen
	}
	// serve is the library's first user (docs/library.md): the same Open
	// a Go program calls, with a listener, signals and profiles around it.
	o := oncegate.Options{ConfigFile: *path, Store: storeURL, Coordination: coordURL, Logger: log, AccessLog: logOut, MetricsListen: metricsAddr}
	if ep := pol.Config.Telemetry.OTLPEndpoint; ep != "" {
		tracer, stopTracing, err := startTracing(ctx, ep)
		if err != nil {
			fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
			return 1
		}
		o.Tracer = tracer
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := stopTracing(sctx); err != nil {
				log.Warn("could not flush the last spans", "err", err)
			}
		}()
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	g, err := oncegate.Open(openCtx, o)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", strings.TrimPrefix(err.Error(), "oncegate: "))
		return 1
	}
	defer g.Close()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := g.Reload(); err != nil {
				log.Error("configuration not reloaded: the old one stays", "err", err.Error())
			}
		}
	}()
	addr := pol.Config.Listen
	if *listen != "" {
		addr = *listen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	if metricsAddr != "" {
		mln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "oncegate serve: metrics_listen: %v\n", err)
			return 1
		}
		msrv := &http.Server{Handler: g.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		fmt.Fprintf(stdout, "oncegate metrics on http://%s/metrics\n", mln.Addr())
	}
	fmt.Fprintf(stdout, "oncegate listening on http://%s (policy %s, gateway %s)\n", ln.Addr(), pol.Digest[:12], g.ID())
	coordText := coordURL
	if policy.IsRedis(coordURL) {
		coordText = redis.Redact(coordURL) // a Sentinel's password may be in its query
	}
	log.Info("listening", "addr", ln.Addr().String(), "policy", pol.Digest[:12], "gateway", g.ID(),
		"store", redactURL(storeURL), "coordination", coordText, "version", strings.SplitN(versionText(), "\n", 2)[0],
		"models", len(pol.Aliases), "tenants", len(pol.Tenants), "gogc", gcText(mem), "memory_limit", limitText(mem))
	if err := g.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "oncegate stopped")
	return 0
}

// gcText describes the collector's target for the start-up line.
func gcText(m memtune.Settings) string {
	switch {
	case m.Adaptive:
		return fmt.Sprintf("adaptive (%d while the live heap is small, %d MiB of headroom)", m.GCPercent, m.Headroom>>20)
	case m.GCPercent < 0:
		return "off (GOGC)"
	}
	return fmt.Sprintf("%d (GOGC)", m.GCPercent)
}

// limitText describes the soft memory limit for the start-up line.
func limitText(m memtune.Settings) string {
	if m.LimitFrom == "" {
		return "none"
	}
	return fmt.Sprintf("%d MiB (%s)", m.Limit>>20, m.LimitFrom)
}
