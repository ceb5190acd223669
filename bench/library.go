package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate"
	"github.com/oncegate/oncegate/internal/logsink"
	"github.com/oncegate/oncegate/internal/memtune"
)

// The -library comparison (docs/library.md, docs/performance.md): the
// CPU one request costs the client and the gateway together, when the
// client calls an embedded gateway through HTTPClient and when it calls
// `oncegate serve` over loopback. The mock provider stays in the
// benchmark's process, so its CPU is counted in neither; each variant's
// client runs in a child process of its own — with the gateway in it for
// the in-process variant, beside a `serve` process for the loopback one —
// and the benchmark reads the CPU of the processes it involves from
// /proc (utime + stime, what getrusage reports) around each round.

// libraryEnv, when set, makes this program a client child of the
// -library comparison: "inprocess" opens the gateway from the
// configuration file libraryConfigEnv names and calls it through
// HTTPClient; "http" calls the server at libraryURLEnv. It dispatches
// at init, so that the benchmark's test binary serves as the child too.
const (
	libraryEnv       = "ONCEGATE_BENCH_LIBRARY"
	libraryConfigEnv = "ONCEGATE_BENCH_LIBRARY_CONFIG"
	libraryURLEnv    = "ONCEGATE_BENCH_LIBRARY_URL"
	libraryModelEnv  = "ONCEGATE_BENCH_LIBRARY_MODEL"
)

func init() {
	if mode := os.Getenv(libraryEnv); mode != "" {
		if err := libraryChild(mode, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench library client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// libraryFull is the ledger of the benchmark's `full` path, at path.
func libraryFull(path string) string {
	return "store: sqlite://" + path + "\nledger: {sync: full}\n"
}

// libraryChild is a client child. It prints "ready" once it can send,
// then for each line "run N C TAG" on in sends N distinct requests from C
// clients and prints "done REQUESTS ERRORS ELAPSED_NS P50_NS"; it returns
// at the end of in (closing its gateway, if it has one).
func libraryChild(mode string, in io.Reader, out io.Writer) error {
	// Every child's collector is tuned as serve tunes its own, so that
	// the collector makes no difference between the variants.
	memtune.Start(os.LookupEnv, 0, 0, "/sys/fs/cgroup")
	var client *http.Client
	var url string
	model := os.Getenv(libraryModelEnv)
	auth := model == "bench" // the gateways' model, for the tenant's key; the mock's needs none
	switch mode {
	case "inprocess":
		// As serve opens it: its events and access log gathered into few
		// writes to stderr (a file the benchmark keeps).
		sink := logsink.New(os.Stderr)
		defer sink.Close()
		gw, err := oncegate.Open(context.Background(), oncegate.Options{ConfigFile: os.Getenv(libraryConfigEnv),
			Logger: slog.New(slog.NewJSONHandler(sink, nil)), AccessLog: sink})
		if err != nil {
			return err
		}
		defer gw.Close()
		client, url = gw.HTTPClient(benchKey), "http://oncegate/v1/chat/completions"
	case "http":
		// Enough idle connections for the load, as load's client keeps.
		client = &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true}}
		url = os.Getenv(libraryURLEnv) + "/v1/chat/completions"
	default:
		return fmt.Errorf("%s=%q: want inprocess or http", libraryEnv, mode)
	}
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var n, c int
		var tag string
		if _, err := fmt.Sscanf(sc.Text(), "run %d %d %s", &n, &c, &tag); err != nil {
			return fmt.Errorf("%q: %w", sc.Text(), err)
		}
		r := libraryLoad(client, url, model, tag, auth, n, c)
		fmt.Fprintf(out, "done %d %d %d %d\n", r.requests, r.errors, r.elapsed, pct(r.latencies, 0.5))
	}
	return sc.Err()
}

// libraryLoad sends n distinct requests from c clients with client, each
// client sending its next request as soon as its last one finished.
func libraryLoad(client *http.Client, url, model, tag string, auth bool, n, c int) *result {
	r := &result{}
	var left, requests, errs atomic.Int64
	left.Store(int64(n))
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			var lat []time.Duration
			for i := left.Add(-1); i >= 0; i = left.Add(-1) {
				// A distinct body per request: identical ones would join
				// in flight and flatter the gateway.
				body := []byte(`{"model":"` + model + `","stream":false,"messages":[{"role":"user","content":"Benchmark the reach, request ` +
					tag + "-" + strconv.FormatInt(i, 10) + `."}]}`)
				t0 := time.Now()
				if _, err := once(client, url, body, auth, false); err != nil {
					if errs.Add(1) <= 3 {
						fmt.Fprintln(os.Stderr, err)
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				requests.Add(1)
			}
			mu.Lock()
			r.latencies = append(r.latencies, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r.elapsed, r.requests, r.errors = time.Since(start), requests.Load(), errs.Load()
	return r
}

// reach is one variant of the comparison: a client child and, for the
// loopback ones, the server it calls.
type reach struct {
	name   string
	client *child
	in     io.WriteCloser
	out    *bufio.Scanner
	server *child // nil: none (in process), or the mock itself (direct)
	alone  string // what the client's process holds, when there is no server
}

// reachRound is one round's measurements of a variant.
type reachRound struct {
	requests, errors int64
	elapsed, p50     time.Duration
	client, server   time.Duration // CPU, user + kernel
}

func (r reachRound) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// perRequest is the CPU of client and server per request.
func (r reachRound) perRequest() (total, client, server time.Duration) {
	if r.requests == 0 {
		return 0, 0, 0
	}
	n := time.Duration(r.requests)
	return (r.client + r.server) / n, r.client / n, r.server / n
}

// startReach starts a client child of mode with env, its stderr to log.
func startReach(name, mode, log string, env ...string) (*reach, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), libraryEnv+"="+mode, "BENCH_KEY="+benchKey, "BENCH_ADMIN_KEY="+benchAdminKey), env...)
	if cmd.Stderr, err = os.Create(log); err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &reach{name: name, client: &child{name: name, cmd: cmd}, in: in, out: bufio.NewScanner(stdout)}
	if !r.out.Scan() || r.out.Text() != "ready" {
		r.stop()
		return nil, fmt.Errorf("%s: the client did not start (its log: %s)", name, log)
	}
	return r, nil
}

// round has the child send n requests from c clients, and measures the
// CPU of the processes involved meanwhile.
func (r *reach) round(n, c int, tag string) (reachRound, error) {
	var m reachRound
	cu0, cs0 := r.client.cpu()
	var su0, ss0 time.Duration
	if r.server != nil {
		su0, ss0 = r.server.cpu()
	}
	if _, err := fmt.Fprintf(r.in, "run %d %d %s\n", n, c, tag); err != nil {
		return m, fmt.Errorf("%s: %w", r.name, err)
	}
	if !r.out.Scan() {
		return m, fmt.Errorf("%s: the client ended: %v", r.name, r.out.Err())
	}
	var elapsed, p50 int64
	if _, err := fmt.Sscanf(r.out.Text(), "done %d %d %d %d", &m.requests, &m.errors, &elapsed, &p50); err != nil {
		return m, fmt.Errorf("%s: %q: %w", r.name, r.out.Text(), err)
	}
	m.elapsed, m.p50 = time.Duration(elapsed), time.Duration(p50)
	cu1, cs1 := r.client.cpu()
	m.client = cu1 - cu0 + cs1 - cs0
	if r.server != nil {
		su1, ss1 := r.server.cpu()
		m.server = su1 - su0 + ss1 - ss0
	}
	return m, nil
}

// stop ends the client child: the end of its input closes its gateway.
func (r *reach) stop() {
	_ = r.in.Close()
	done := make(chan struct{})
	go func() { _ = r.client.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = r.client.cmd.Process.Kill()
		<-done
	}
}

// The variants' names.
const (
	reachInProcess = "oncegate in process (HTTPClient)"
	reachServe     = "oncegate serve over loopback"
	reachProxy     = "bare proxy over loopback"
	reachDirect    = "direct (the client alone)"
)

// libraryRun is the -library comparison: each variant in turn, -rounds
// times, each round -requests distinct requests from -concurrency
// clients, after a warm-up; the median round of each is reported.
func libraryRun(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.tokens == 0 {
		o.tokens = 32
	}
	_, mockURL, err := startMock(ctx, o.ttft, o.interval, o.tokens)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "oncegate-bench-library")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	want := func(name string) bool {
		return slices.ContainsFunc(strings.Split(o.only, ","), func(w string) bool { return strings.Contains(name, w) })
	}
	var reaches []*reach
	var stops []func()
	defer func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}()
	add := func(r *reach, server *child, alone string) {
		r.server, r.alone = server, alone
		reaches = append(reaches, r)
		stops = append(stops, r.stop)
	}
	if want(reachInProcess) {
		cfg := filepath.Join(dir, "inprocess.yaml")
		conf := strings.ReplaceAll(benchConfig, "MOCK", mockURL) + libraryFull(filepath.Join(dir, "inprocess.db"))
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			return err
		}
		r, err := startReach(reachInProcess, "inprocess", filepath.Join(dir, "inprocess.log"), libraryConfigEnv+"="+cfg, libraryModelEnv+"=bench")
		if err != nil {
			return err
		}
		add(r, nil, "client and gateway")
	}
	if want(reachServe) {
		bin, err := buildGateway(ctx, dir)
		if err != nil {
			return err
		}
		srv, err := startServe(bin, dir, "", "", "library serve", mockURL, libraryFull(filepath.Join(dir, "serve.db")))
		if err != nil {
			return err
		}
		stops = append(stops, srv.stop)
		r, err := startReach(reachServe, "http", filepath.Join(dir, "serve-client.log"), libraryURLEnv+"="+srv.url, libraryModelEnv+"=bench")
		if err != nil {
			return err
		}
		add(r, srv, "")
	}
	if want(reachProxy) {
		px, err := startProxy(mockURL, dir)
		if err != nil {
			return err
		}
		stops = append(stops, px.stop)
		r, err := startReach(reachProxy, "http", filepath.Join(dir, "proxy-client.log"), libraryURLEnv+"="+px.url, libraryModelEnv+"=bench-model")
		if err != nil {
			return err
		}
		add(r, px, "")
	}
	if want(reachDirect) {
		r, err := startReach(reachDirect, "http", filepath.Join(dir, "direct-client.log"), libraryURLEnv+"="+mockURL, libraryModelEnv+"=bench-model")
		if err != nil {
			return err
		}
		add(r, nil, "the client alone")
	}
	if len(reaches) == 0 {
		return errors.New("-only leaves no variant of -library")
	}
	fmt.Fprintf(out, "oncegate library benchmark: %d distinct requests per variant and round, %d rounds, concurrency %d, mock ttft %v, %d tokens, ledger sqlite at sync full\n",
		o.requests, o.rounds, o.concurrency, o.ttft, o.tokens)
	fmt.Fprintln(out, "(the mock in this process; each client in a process of its own, with the gateway in it or beside it; CPU of client + server from /proc)")
	fmt.Fprintln(out)
	for _, r := range reaches {
		// Warm up: connections, caches, the ledger's first pages.
		if _, err := r.round(min(o.requests, 2000), o.concurrency, "warm"); err != nil {
			return err
		}
	}
	rounds := map[string][]reachRound{}
	for i := range o.rounds {
		for _, r := range reaches {
			fmt.Fprintf(out, "round %d: %-34s ...", i+1, r.name)
			m, err := r.round(o.requests, o.concurrency, "r"+strconv.Itoa(i))
			if err != nil {
				return err
			}
			total, _, _ := m.perRequest()
			fmt.Fprintf(out, " %6.0f requests/s, %4.0f µs CPU per request, %d errors\n", m.rps(), us(total), m.errors)
			rounds[r.name] = append(rounds[r.name], m)
		}
	}
	fmt.Fprintln(out)
	libraryReport(out, reaches, rounds)
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// medianBy is the round with the median of key.
func medianBy(rs []reachRound, key func(reachRound) float64) reachRound {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b reachRound) int {
		switch ka, kb := key(a), key(b); {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// libraryReport prints each variant's median CPU per request (client and
// server apart) and median throughput, and both as ratios to the
// in-process variant.
func libraryReport(out io.Writer, reaches []*reach, rounds map[string][]reachRound) {
	cpuOf := func(m reachRound) float64 { t, _, _ := m.perRequest(); return float64(t) }
	var base *reachRound
	if rs := rounds[reachInProcess]; len(rs) > 0 {
		b := medianBy(rs, cpuOf)
		base = &b
	}
	baseRPS := 0.0
	if base != nil {
		baseRPS = medianBy(rounds[reachInProcess], reachRound.rps).rps()
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tCPU/request (client + server)\t÷ in process\trequests/s\t÷ in process\tp50\terrors\t")
	for _, r := range reaches {
		rs := rounds[r.name]
		if len(rs) == 0 {
			continue
		}
		m := medianBy(rs, cpuOf)
		total, client, server := m.perRequest()
		split := fmt.Sprintf("%.0f µs (%.0f + %.0f)", us(total), us(client), us(server))
		if r.server == nil {
			split = fmt.Sprintf("%.0f µs (%s)", us(total), r.alone)
		}
		rps := medianBy(rs, reachRound.rps)
		cpuRatio, rpsRatio := "–", "–"
		if base != nil {
			if bt, _, _ := base.perRequest(); bt > 0 {
				cpuRatio = fmt.Sprintf("%.2f", float64(total)/float64(bt))
				rpsRatio = fmt.Sprintf("%.2f", rps.rps()/baseRPS)
			}
		}
		var errs int64
		for _, x := range rs {
			errs += x.errors
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%v\t%d\t\n", r.name, split, cpuRatio, rps.rps(), rpsRatio, round(m.p50), errs)
	}
	_ = tw.Flush()
}
