// Command bench is oncegate's load benchmark. From the repository's root,
// `go run ./bench` builds cmd/oncegate and measures, in one run, the mock
// provider reached directly, through a bare httputil.ReverseProxy and
// through the gateway (in-memory, and SQLite at ledger.sync full and
// normal), each server in a process of its own: requests per second as a
// share of the bare proxy's, each server's CPU per request, and the
// latency a lone client sees added. -streams C opens C streams at once,
// -bodies N sends N large bodies at once, -stages prints the per-stage CPU
// budget from a gateway's profile; docs/performance.md explains each, and
// `go run ./bench -h` lists the knobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/memtune"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

func main() {
	if target := os.Getenv(proxyEnv); target != "" {
		if err := serveBareProxy(target); err != nil {
			fmt.Fprintln(os.Stderr, "bench proxy:", err)
			os.Exit(1)
		}
		return
	}
	o := options{}
	flag.IntVar(&o.requests, "requests", 20000, "distinct requests per path and round at -concurrency")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds over every path; each path's median round is reported")
	flag.BoolVar(&o.noDistinct, "no-distinct", false, "skip the distinct requests of each round (with -repeated: only the same questions again)")
	flag.BoolVar(&o.again, "repeated", true, "each round, after the distinct requests, ask the same -requests questions on each path again (from round 2 each replaces its finished twin)")
	flag.IntVar(&o.steady, "steady", 0, "also measure each SQLite gateway on a ledger preloaded with this many finished requests (a day's: 1000000), beside a fresh one")
	flag.StringVar(&o.steadyCache, "steady-cache", "", "keep the preloaded ledger in this directory between runs (default: $TMPDIR/oncegate-bench-steady)")
	flag.IntVar(&o.lone, "lone", 2000, "requests per path from a lone client (added latency); 0 skips")
	flag.IntVar(&o.concurrency, "concurrency", 32, "concurrent clients")
	flag.IntVar(&o.streams, "streams", 0, "instead: open this many streams at once on each path and report time to first token, RSS per stream and file descriptors")
	flag.DurationVar(&o.ttft, "ttft", 0, "mock time to first token (-streams: 300ms unless set)")
	flag.DurationVar(&o.interval, "interval", 0, "mock time between tokens (-streams: 50ms unless set)")
	flag.IntVar(&o.tokens, "tokens", 0, "tokens per answer (default 32; -streams: 20)")
	flag.IntVar(&o.bodies, "bodies", 0, "instead: send this many requests at once with -body-bytes bodies (three waves) and report each server's peak RSS")
	flag.IntVar(&o.bodyBytes, "body-bytes", 3_700_000, "body size for -bodies")
	flag.Int64Var(&o.gcHeadroom, "gc-headroom", 0, "the gateways' limits.gc_headroom_bytes: how far past what is alive their heap may grow (0: the gateway's default, 128 MiB)")
	flag.StringVar(&o.only, "only", "", "run only the paths whose name contains one of these (comma-separated)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "duration of each -replicated run")
	flag.BoolVar(&o.amplify, "amplification", false, "instead: the retry amplification table (a naive retry stack versus oncegate, alone and with a fallback provider, at each -failures rate of the primary provider)")
	flag.IntVar(&o.actions, "actions", 1000, "user actions per amplification run")
	flag.StringVar(&o.failures, "failures", "0,10,30,50,90,100", "the primary provider's failure rates (%) for -amplification, comma-separated")
	flag.StringVar(&o.stacks, "stacks", "naive,oncegate,fallback,fallback-last", "the stacks -amplification compares, comma-separated: naive, oncegate (the primary alone), fallback (a fallback provider too), fallback-last (the same, the primary at 2 of the 3 attempts)")
	flag.Float64Var(&o.budget.Ratio, "budget-ratio", 0.1, "oncegate's retry_budget.ratio for -amplification")
	flag.Float64Var(&o.budget.MinPerSecond, "budget-min-per-second", 10, "oncegate's retry_budget.min_per_second for -amplification")
	flag.DurationVar(&o.budget.Window, "budget-window", 10*time.Second, "oncegate's retry_budget.window for -amplification")
	flag.BoolVar(&o.replicated, "replicated", false, "also run a gateway on PostgreSQL and Redis, as one of several replicas, in this process (-postgres, -redis)")
	flag.BoolVar(&o.library, "library", false, "instead: the CPU per request of client + gateway, an embedded gateway called through HTTPClient against serve over loopback (and the bare proxy, and the client alone), at -concurrency, ledger sqlite at sync full")
	flag.BoolVar(&o.transport, "transport", false, "instead: the HTTP transport's share: a bare hop on net/http (the bare proxy), on fasthttp and on each mix of the two, beside the gateways -only names (default bare,memory,full), in interleaved rounds; with -profiles, the memory gateway's CPU split into transport and its own work")
	flag.BoolVar(&o.join, "join", false, "instead: how long a chunk takes to reach a client that joined the stream on another replica (-postgres, -redis)")
	flag.StringVar(&o.postgres, "postgres", envOr("ONCEGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL for -replicated and -join (a schema of the benchmark's own is created and dropped)")
	flag.StringVar(&o.redis, "redis", envOr("ONCEGATE_TEST_REDIS", "redis://127.0.0.1:6379/0"), "Redis for -replicated and -join (a key prefix of the benchmark's own)")
	flag.StringVar(&o.profiles, "profiles", "", "have each gateway write its CPU profile into this directory (<path>.cpu, for go tool pprof)")
	stagesOf := flag.String("stages", "", "instead: print the per-stage CPU budget from this gateway CPU profile (one -profiles wrote) of -stage-requests requests")
	stageRequests := flag.Int("stage-requests", 0, "how many requests the -stages profile covers (a run's warm-up included: min(requests, 2000) + rounds × requests + lone)")
	flag.StringVar(&o.traces, "traces", "", "have each gateway write its execution trace into this directory (<path>.trace, for go tool trace)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the benchmark's own process (load generator, mock, in-process paths) to this file")
	traceFile := flag.String("trace", "", "write an execution trace of the whole benchmark to this file (go tool trace)")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the whole benchmark to this file")
	flag.Parse()
	if *memprofile != "" {
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err == nil && trace.Start(f) == nil {
			defer trace.Stop()
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	// The gateway runs here as `oncegate serve` runs it: with its
	// collector target (unless GOGC is set), which the direct path in the
	// same process shares.
	memtune.Start(os.LookupEnv, 0, 0, "/sys/fs/cgroup")
	if *stagesOf != "" {
		if *stageRequests <= 0 {
			fmt.Fprintln(os.Stderr, "bench: -stages needs -stage-requests N, the number of requests the profile covers")
			os.Exit(2)
		}
		if err := stageBudget(*stagesOf, *stageRequests, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	for _, dir := range []string{o.profiles, o.traces} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	do := run
	switch {
	case o.amplify:
		do = amplification
	case o.join:
		do = joinLatency
	case o.library:
		do = libraryRun
	case o.transport:
		do = transportRun
	case o.streams > 0:
		do = streamsRun
	case o.bodies > 0:
		do = bodiesRun
	}
	if err := do(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	gcHeadroom  int64 // the gateways' limits.gc_headroom_bytes (0: their default)
	duration    time.Duration
	concurrency int
	ttft        time.Duration
	interval    time.Duration
	tokens      int
	only        string
	requests    int
	rounds      int
	lone        int
	streams     int
	profiles    string
	traces      string
	bodies      int
	bodyBytes   int
	amplify     bool
	actions     int
	failures    string
	stacks      string
	budget      breaker.BudgetConfig
	replicated  bool
	join        bool
	library     bool
	transport   bool
	postgres    string
	redis       string
	again       bool   // each round, also the same questions as every round before
	noDistinct  bool   // each round, no distinct questions
	steady      int    // preload the SQLite ledgers of a second set of paths with this many requests
	steadyCache string // where the preloaded ledger is kept between runs
}

// result is one run's measurements.
type result struct {
	name      string
	redisRTs  string // Redis round trips per logical request ("" when none)
	requests  int64
	errors    int64
	elapsed   time.Duration
	latencies []time.Duration
	ttfts     []time.Duration
	user, sys time.Duration // the server process's CPU during the run
	// goroutines and switches are what the server process started and
	// how often its threads were switched out during the run (-1: unknown).
	goroutines, switches int64
}

func (r *result) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// benchPreamble is one tenant and the mock as the one provider.
const benchPreamble = `
listen: 127.0.0.1:0
admin_key_env: BENCH_ADMIN_KEY
tenants: [{id: bench, api_key_env: BENCH_KEY, budget: {requests_per_minute: 100000000, cost_usd_per_day: 1000000}}]
providers: [{id: mock, type: openai, base_url: "MOCK/v1", timeouts: {connect: 2s, first_byte: 30s, idle: 30s}}]
`

const benchConfig = benchPreamble + `
routes:
  - {id: mock, provider: mock, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 1,
     capabilities: {streaming: true, max_context_tokens: 10000000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: bench, routes: [mock], retry: {max_attempts: 1, deadline: 60s}}
`

const benchKey = "sk-bench"

// benchAdminKey is the gateways' admin key: the benchmark reads their
// /metrics with it.
const benchAdminKey = "sk-bench-admin"

// benchSecret resolves the benchmark's configurations' secrets.
func benchSecret(name string) (string, bool) {
	if name == "BENCH_ADMIN_KEY" {
		return benchAdminKey, true
	}
	return benchKey, true
}

// startMock serves the mock provider until ctx ends.
func startMock(ctx context.Context, ttft, interval time.Duration, tokens int) (*mock.Mock, string, error) {
	m := mock.New(mock.Config{TTFT: ttft, TokenInterval: interval, Tokens: tokens})
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	go func() { _ = m.Serve(ctx, mln) }()
	return m, "http://" + mln.Addr().String(), nil
}

// benchPolicy is benchConfig in front of the mock at mockURL.
func benchPolicy(mockURL string) (*policy.Policy, *config.Secrets, error) {
	pol, err := policy.Parse("bench.yaml", []byte(strings.ReplaceAll(benchConfig, "MOCK", mockURL)))
	if err != nil {
		return nil, nil, err
	}
	secrets, err := pol.Config.ResolveSecrets(benchSecret)
	return pol, secrets, err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 10*time.Millisecond || d < -10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d > time.Millisecond || d < -time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// startGateway serves the policy in this process over st; nil means the
// in-memory ledger.
func startGateway(ctx context.Context, pol *policy.Policy, secrets *config.Secrets, st ledger.Store) (string, error) {
	if st == nil {
		st = memory.New(10_000)
	}
	g, err := gateway.New(pol, secrets, gateway.Options{Ledger: st})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = g.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), nil
}
