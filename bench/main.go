// Command bench is oncegate's load benchmark: it runs the mock provider
// directly and through the gateway in the same process and the same run —
// non-streaming and streaming, at a fixed concurrency — and prints p50/p99
// latency, requests per second and time to first token for both paths and
// their ratios. Run it with `go run ./bench` (`-h` for the knobs).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

func main() {
	o := options{}
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "duration of each of the four runs")
	flag.IntVar(&o.concurrency, "concurrency", 64, "concurrent clients")
	flag.DurationVar(&o.ttft, "ttft", 0, "mock time to first token")
	flag.DurationVar(&o.interval, "interval", 0, "mock time between tokens")
	flag.IntVar(&o.tokens, "tokens", 32, "tokens per answer")
	flag.StringVar(&o.only, "only", "", "run only the runs whose name contains this")
	flag.BoolVar(&o.ledger, "ledger", false, "also run the gateway with the durable SQLite ledger (synchronous=FULL, group commit)")
	flag.BoolVar(&o.amplify, "amplification", false, "instead: the retry amplification table (naive retry stack versus oncegate at 0, 50 and 100 % upstream failure)")
	flag.IntVar(&o.actions, "actions", 1000, "user actions per amplification run")
	flag.BoolVar(&o.replicated, "replicated", false, "also run a gateway on PostgreSQL and Redis, as one of several replicas (-postgres, -redis)")
	flag.BoolVar(&o.join, "join", false, "instead: how long a chunk takes to reach a client that joined the stream on another replica (-postgres, -redis)")
	flag.StringVar(&o.postgres, "postgres", envOr("ONCEGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL for -replicated and -join (a schema of the benchmark's own is created and dropped)")
	flag.StringVar(&o.redis, "redis", envOr("ONCEGATE_TEST_REDIS", "redis://127.0.0.1:6379/0"), "Redis for -replicated and -join (a key prefix of the benchmark's own)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole benchmark to this file")
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
	o.gcPercent = gateway.TuneGC(os.LookupEnv)
	do := run
	switch {
	case o.amplify:
		do = amplification
	case o.join:
		do = joinLatency
	}
	if err := do(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	duration    time.Duration
	concurrency int
	ttft        time.Duration
	interval    time.Duration
	tokens      int
	only        string
	ledger      bool
	amplify     bool
	actions     int
	replicated  bool
	join        bool
	postgres    string
	redis       string
	gcPercent   int // the collector target in force
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
tenants: [{id: bench, api_key_env: BENCH_KEY, budget: {requests_per_minute: 100000000, cost_usd_per_day: 1000000}}]
providers: [{id: mock, type: openai, base_url: "MOCK/v1", timeouts: {connect: 2s, first_byte: 30s, idle: 30s}}]
`

const benchConfig = benchPreamble + `
routes:
  - {id: mock, provider: mock, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 1,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: bench, routes: [mock], retry: {max_attempts: 1, deadline: 60s}}
`

const benchKey = "sk-bench"

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
	secrets, err := pol.Config.ResolveSecrets(func(string) (string, bool) { return benchKey, true })
	return pol, secrets, err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, mockURL, err := startMock(ctx, o.ttft, o.interval, o.tokens)
	if err != nil {
		return err
	}
	pol, secrets, err := benchPolicy(mockURL)
	if err != nil {
		return err
	}
	gwURL, err := startGateway(ctx, pol, secrets, nil)
	if err != nil {
		return err
	}
	var durableURL string
	if o.ledger {
		dir, err := os.MkdirTemp("", "oncegate-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		st, err := sqlite.Open(filepath.Join(dir, "ledger.db"))
		if err != nil {
			return err
		}
		defer st.Close()
		if durableURL, err = startGateway(ctx, pol, secrets, st); err != nil {
			return err
		}
	}

	var rep *replicaGateway
	if o.replicated {
		sh, err := newShared(ctx, o.postgres, o.redis)
		if err != nil {
			return err
		}
		defer sh.drop()
		if rep, err = startReplica(ctx, pol, secrets, sh); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "oncegate load benchmark: concurrency %d, %v per run, mock ttft %v, interval %v, %d tokens, GOMAXPROCS %d, GOGC %d\n\n",
		o.concurrency, o.duration, o.ttft, o.interval, o.tokens, gomaxprocs(), o.gcPercent)
	runs := []struct {
		name, url, model string
		stream, auth     bool
	}{
		{"direct json", mockURL, "bench-model", false, false},
		{"gateway json", gwURL, "bench", false, true},
		{"direct stream", mockURL, "bench-model", true, false},
		{"gateway stream", gwURL, "bench", true, true},
	}
	if o.ledger {
		runs = append(runs, struct {
			name, url, model string
			stream, auth     bool
		}{"durable json", durableURL, "bench", false, true}, struct {
			name, url, model string
			stream, auth     bool
		}{"durable stream", durableURL, "bench", true, true})
	}
	if rep != nil {
		runs = append(runs, struct {
			name, url, model string
			stream, auth     bool
		}{"replicated json", rep.url, "bench", false, true}, struct {
			name, url, model string
			stream, auth     bool
		}{"replicated stream", rep.url, "bench", true, true})
	}
	var results []*result
	for _, rn := range runs {
		if o.only != "" && !strings.Contains(rn.name, o.only) {
			continue
		}
		fmt.Fprintf(out, "running %-17s ...", rn.name)
		var rt0 int64
		if rep != nil {
			rt0 = rep.co.RoundTrips()
		}
		r := load(ctx, o, rn.name, rn.url+"/v1/chat/completions", rn.model, rn.stream, rn.auth)
		if rep != nil && rn.url == rep.url {
			r.redisRTs = roundTrips(rep.co.RoundTrips()-rt0, r.requests)
		}
		fmt.Fprintf(out, " %d requests, %d errors\n", r.requests, r.errors)
		results = append(results, r)
	}
	fmt.Fprintln(out)
	report(out, results)
	return nil
}

// startGateway serves the policy in process over st; nil means the
// in-memory ledger (no durability: what the gateway costs without disk).
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

func gomaxprocs() int { return runtimeGOMAXPROCS() }

// load runs one closed-loop run: concurrency clients, each sending the next
// request as soon as the last one finished.
func load(ctx context.Context, o options, name, url, model string, stream, auth bool) *result {
	tr := &http.Transport{MaxIdleConns: o.concurrency * 2, MaxIdleConnsPerHost: o.concurrency * 2, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	r := &result{name: name}
	var mu sync.Mutex
	var requests, errs, seq atomic.Int64
	end := time.Now().Add(o.duration)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < o.concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat, ttft []time.Duration
			for time.Now().Before(end) && ctx.Err() == nil {
				// A distinct body per request: identical ones would join
				// in flight and flatter the gateway.
				body := []byte(`{"model":"` + model + `","stream":` + fmt.Sprint(stream) +
					`,"messages":[{"role":"user","content":"Benchmark the relay, request ` + strconv.FormatInt(seq.Add(1), 10) + `."}]}`)
				t0 := time.Now()
				first, err := once(client, url, body, auth, stream)
				if err != nil {
					if errs.Add(1) <= 3 {
						fmt.Fprintf(os.Stderr, "\n%s: %v", name, err)
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				if stream {
					ttft = append(ttft, first.Sub(t0))
				}
				requests.Add(1)
			}
			mu.Lock()
			r.latencies = append(r.latencies, lat...)
			r.ttfts = append(r.ttfts, ttft...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed, r.requests, r.errors = time.Since(start), requests.Load(), errs.Load()
	return r
}

var contentMark = []byte(`"content":"`)

// once sends one request and reads the whole answer; for a stream it
// returns when the first content token arrived.
func once(client *http.Client, url string, body []byte, auth, stream bool) (time.Time, error) {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer "+benchKey)
	}
	res, err := client.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, res.Body)
		return time.Time{}, fmt.Errorf("status %d", res.StatusCode)
	}
	if !stream {
		_, err := io.Copy(io.Discard, res.Body)
		return time.Now(), err
	}
	var first time.Time
	rd := bufio.NewReader(res.Body)
	for {
		line, err := rd.ReadSlice('\n')
		if first.IsZero() && bytes.Contains(line, contentMark) && !bytes.Contains(line, []byte(`"content":""`)) {
			first = time.Now()
		}
		if err == io.EOF {
			return first, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return first, err
		}
	}
}

func report(out io.Writer, rs []*result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\trequests/s\tp50\tp99\tttft p50\tttft p99\terrors\tRedis round trips/request\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.0f\t%v\t%v\t%v\t%v\t%d\t%s\t\n", r.name, r.rps(), round(pct(r.latencies, 0.5)), round(pct(r.latencies, 0.99)),
			round(pct(r.ttfts, 0.5)), round(pct(r.ttfts, 0.99)), r.errors, r.redisRTs)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	byName := map[string]*result{}
	for _, r := range rs {
		byName[r.name] = r
	}
	for _, pair := range [][2]string{{"direct json", "gateway json"}, {"direct stream", "gateway stream"},
		{"direct json", "durable json"}, {"direct stream", "durable stream"}, {"gateway json", "durable json"},
		{"durable json", "replicated json"}, {"durable stream", "replicated stream"}, {"gateway json", "replicated json"}} {
		d, g := byName[pair[0]], byName[pair[1]]
		if d == nil || g == nil {
			continue
		}
		fmt.Fprintf(out, "%-17s / %-14s requests/s %.2f×   added p50 %v   added p99 %v",
			g.name, d.name, g.rps()/d.rps(), round(pct(g.latencies, 0.5)-pct(d.latencies, 0.5)),
			round(pct(g.latencies, 0.99)-pct(d.latencies, 0.99)))
		if len(d.ttfts) > 0 {
			fmt.Fprintf(out, "   added ttft p50 %v", round(pct(g.ttfts, 0.5)-pct(d.ttfts, 0.5)))
		}
		fmt.Fprintln(out)
	}
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
