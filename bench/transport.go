package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"
)

// The -transport comparison (docs/performance.md, "Does the transport
// bound us?"): is the HTTP stack what bounds oncegate? The same load
// generator sends the benchmark's request through a bare hop built on
// net/http (the bare proxy), on fasthttp (server and client, as Bifrost
// serves and calls), and on each mix of the two, each hop in a process of
// its own as the bare proxy is, with the gateways beside them in the same
// interleaved rounds. With -profiles, the in-memory gateway's CPU profile
// is split into what its HTTP transport costs and what the rest does.

// transportEnv, when set, makes this program one of the hops:
// "SERVER/CLIENT", each of "fasthttp" or "nethttp", in front of the URL
// transportTargetEnv holds. It dispatches at init, so that the
// benchmark's test binary serves as the hop too.
const (
	transportEnv       = "ONCEGATE_BENCH_TRANSPORT"
	transportTargetEnv = "ONCEGATE_BENCH_TRANSPORT_TARGET"
)

func init() {
	if kind := os.Getenv(transportEnv); kind != "" {
		if err := serveHop(kind, os.Getenv(transportTargetEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "bench hop:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// hops are the transports compared against the bare proxy (which is
// net/http on both sides): the name of each path and its SERVER/CLIENT.
var hops = []struct{ name, kind string }{
	{"fasthttp hop", "fasthttp/fasthttp"},
	{"fasthttp server, net/http client", "fasthttp/nethttp"},
	{"net/http server, fasthttp client", "nethttp/fasthttp"},
}

// hopHeader is the hop-by-hop headers a proxy does not pass on (RFC 9110
// §7.6.1), as httputil.ReverseProxy drops them.
var hopHeader = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// serveHop serves the hop kind in front of target: it prints where it
// listens and serves until killed. Every client keeps as many idle
// connections as the load needs, as the bare proxy's does.
func serveHop(kind, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("target %q: not a URL", target)
	}
	server, client, ok := strings.Cut(kind, "/")
	if !ok {
		return fmt.Errorf("hop %q: want SERVER/CLIENT", kind)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("hop listening on http://%s\n", ln.Addr())
	fc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 4096, MaxIdleConnDuration: 90 * time.Second}
	nc := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	switch server + "/" + client {
	case "fasthttp/fasthttp":
		// fasthttp's proxy idiom: the request it parsed is sent on as
		// it is, the answer read straight into the response it writes.
		return fastServe(ln, func(ctx *fasthttp.RequestCtx) {
			for h := range hopHeader {
				ctx.Request.Header.Del(h)
			}
			if err := fc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), http.StatusBadGateway)
			}
		})
	case "fasthttp/nethttp":
		return fastServe(ln, func(ctx *fasthttp.RequestCtx) {
			req, err := http.NewRequest(string(ctx.Method()), target+string(ctx.RequestURI()), bytes.NewReader(ctx.PostBody()))
			if err != nil {
				ctx.Error(err.Error(), http.StatusBadRequest)
				return
			}
			for k, v := range ctx.Request.Header.All() {
				if name := http.CanonicalHeaderKey(string(k)); !hopHeader[name] && name != "Content-Length" && name != "Host" {
					req.Header.Add(name, string(v))
				}
			}
			res, err := nc.RoundTrip(req)
			if err != nil {
				ctx.Error(err.Error(), http.StatusBadGateway)
				return
			}
			ctx.SetStatusCode(res.StatusCode)
			for k, vs := range res.Header {
				if !hopHeader[k] && k != "Content-Length" {
					for _, v := range vs {
						ctx.Response.Header.Add(k, v)
					}
				}
			}
			// fasthttp closes the body once it has written it.
			ctx.SetBodyStream(res.Body, int(res.ContentLength))
		})
	case "nethttp/fasthttp":
		mux := http.NewServeMux()
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { writeFigures(w) })
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI(target + r.URL.RequestURI())
			req.Header.SetMethod(r.Method)
			for k, vs := range r.Header {
				if !hopHeader[k] {
					for _, v := range vs {
						req.Header.Add(k, v)
					}
				}
			}
			if _, err := io.Copy(req.BodyWriter(), r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if err := fc.Do(req, res); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			h := w.Header()
			for k, v := range res.Header.All() {
				if name := http.CanonicalHeaderKey(string(k)); !hopHeader[name] && name != "Content-Length" {
					h.Add(name, string(v))
				}
			}
			h.Set("Content-Length", strconv.Itoa(len(res.Body())))
			w.WriteHeader(res.StatusCode())
			_, _ = w.Write(res.Body())
		})
		return http.Serve(ln, mux)
	}
	return fmt.Errorf("hop %q: want SERVER/CLIENT, each fasthttp or nethttp", kind)
}

// fastServe serves handler with fasthttp on ln, and the runtime figures
// at GET /metrics as the bare proxy does.
func fastServe(ln net.Listener, handler fasthttp.RequestHandler) error {
	s := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if ctx.IsGet() && string(ctx.Path()) == "/metrics" {
				writeFigures(ctx)
				return
			}
			handler(ctx)
		},
		NoDefaultServerHeader: true,
	}
	return s.Serve(ln)
}

// writeFigures writes runtimeFigures as the bare proxy's /metrics does.
func writeFigures(w io.Writer) {
	s := make([]metrics.Sample, len(runtimeFigures))
	for i, f := range runtimeFigures {
		s[i].Name = f.metric
	}
	metrics.Read(s)
	for i, f := range runtimeFigures {
		fmt.Fprintf(w, "%s %d\n", f.name, s[i].Value.Uint64())
	}
}

// startHop starts the hop kind in front of target, in a process of its
// own.
func startHop(name, kind, target, logDir string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), transportEnv+"="+kind, transportTargetEnv+"="+target)
	slug := strings.NewReplacer(" ", "-", ",", "", "/", "").Replace(name)
	if cmd.Stderr, err = os.Create(filepath.Join(logDir, slug+".log")); err != nil {
		return nil, err
	}
	return startChild(name, cmd)
}

// transportRun is the -transport comparison: the bare proxy, the hops of
// fasthttp and the gateway paths -only names (default: memory and full)
// in interleaved rounds of -requests at -concurrency, each path's median
// round; then, with -profiles, each gateway's CPU split into its
// transport, its collector and the rest. Paths without a process of
// their own (direct, an in-process replica) are left out.
func transportRun(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.tokens == 0 {
		o.tokens = 32
	}
	if o.only == "" {
		o.only = "bare,memory,full"
	}
	paths, stopPaths, err := startPaths(ctx, o)
	var stops []func()
	cleanup := sync.OnceFunc(func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stopPaths()
	})
	defer cleanup()
	if err != nil {
		return err
	}
	// The hops go where the bare proxy goes: to the mock.
	var target string
	for _, p := range paths {
		if p.name != "bare proxy" {
			continue
		}
		for _, kv := range p.proc.cmd.Env {
			if v, ok := strings.CutPrefix(kv, proxyEnv+"="); ok {
				target = v
			}
		}
	}
	if target == "" {
		return fmt.Errorf("-transport needs the bare proxy (-only must name it: bare)")
	}
	dir, err := os.MkdirTemp("", "oncegate-bench-transport")
	if err != nil {
		return err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	var withHops []path
	for _, p := range paths {
		if p.proc == nil {
			continue // direct, or in this process: no CPU of its own to read
		}
		withHops = append(withHops, p)
		if p.name != "bare proxy" {
			continue
		}
		for _, h := range hops {
			c, err := startHop(h.name, h.kind, target, dir)
			if err != nil {
				return err
			}
			stops = append(stops, c.stop)
			withHops = append(withHops, path{name: h.name, url: c.url, model: "bench-model", proc: c})
		}
	}
	paths = withHops

	fmt.Fprintf(out, "oncegate transport comparison: %d distinct requests per path and round, %d rounds, concurrency %d, %d tokens, GOMAXPROCS %d, load average %s\n",
		o.requests, o.rounds, o.concurrency, o.tokens, gomaxprocs(), loadAverage())
	fmt.Fprintln(out, "(load generator and mock in this process; each hop and each gateway in a process of its own)")
	fmt.Fprintln(out)
	var seq atomic.Int64
	warm := min(o.requests, 2000)
	for _, p := range paths {
		load(ctx, o.concurrency, warm, p, false, &seq)
	}
	rounds := map[string][]*result{}
	for round := range o.rounds {
		for _, p := range paths {
			fmt.Fprintf(out, "round %d: %-34s ...", round+1, p.name)
			u0, s0 := p.proc.cpu()
			g0, w0 := p.proc.goroutines(), p.proc.switches()
			r := load(ctx, o.concurrency, o.requests, p, false, &seq)
			u1, s1 := p.proc.cpu()
			r.user, r.sys = u1-u0, s1-s0
			r.goroutines, r.switches = delta(g0, p.proc.goroutines()), delta(w0, p.proc.switches())
			fmt.Fprintf(out, " %6.0f requests/s, %5.0f µs CPU/request, %d errors\n", r.rps(), cpuPer(r), r.errors)
			rounds[p.name] = append(rounds[p.name], r)
		}
	}
	fmt.Fprintf(out, "load average at the end: %s\n\n", loadAverage())
	transportTable(out, paths, rounds)
	if o.profiles == "" {
		return nil
	}
	// The gateways write their profiles when they stop.
	cleanup()
	fmt.Fprintln(out)
	for _, p := range paths {
		if !strings.HasPrefix(p.name, "oncegate ") {
			continue
		}
		prof := filepath.Join(o.profiles, strings.ReplaceAll(p.name, " ", "-")+".cpu")
		tr, gc, err := transportShare(prof)
		if err != nil {
			return err
		}
		cpu := cpuPer(medianCPU(rounds[p.name]))
		fmt.Fprintf(out, "%s: transport %.0f %% of its profile's CPU, background collector %.0f %%, its own work and the scheduler %.0f %%: %.0f + %.0f + %.0f of its %.0f µs a request\n",
			p.name, 100*tr, 100*gc, 100*(1-tr-gc), tr*cpu, gc*cpu, (1-tr-gc)*cpu, cpu)
	}
	return nil
}

// cpuPer is a round's server CPU per request, in µs.
func cpuPer(r *result) float64 {
	if r.requests == 0 {
		return 0
	}
	return float64((r.user + r.sys).Microseconds()) / float64(r.requests)
}

// medianCPU is the round with the median server CPU per request.
func medianCPU(rs []*result) *result {
	if len(rs) == 0 {
		return &result{elapsed: 1}
	}
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *result) int { return cmp.Compare(cpuPer(a), cpuPer(b)) })
	return s[len(s)/2]
}

// medianOf is the median of xs (the upper one of an even count).
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// transportTable prints, for each path, the round with the median
// server CPU per request for the CPU and its user/kernel split; the round
// with the median throughput for requests/s, latency, goroutines and
// switches (as report does); and each ratio to the bare proxy taken within one
// round, then its median over rounds (the load of a shared machine
// changes between rounds more than within one).
func transportTable(out io.Writer, paths []path, rounds map[string][]*result) {
	bare := rounds["bare proxy"]
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tserver CPU µs/request (user + kernel)\t÷ bare proxy\tsaved against bare\trequests/s\t÷ bare proxy\tp50\tp99\terrors\tgoroutines/request\tswitches/request\t")
	bareCPU := cpuPer(medianCPU(bare))
	for _, p := range paths {
		rs := rounds[p.name]
		var cpuRatios, rpsRatios []float64
		for i, r := range rs {
			if i < len(bare) && cpuPer(bare[i]) > 0 {
				cpuRatios = append(cpuRatios, cpuPer(r)/cpuPer(bare[i]))
				rpsRatios = append(rpsRatios, r.rps()/bare[i].rps())
			}
		}
		m, c := median(rs), medianCPU(rs)
		cpu := cpuPer(c)
		var errs int64
		for _, r := range rs {
			errs += r.errors
		}
		per := func(n int64) string {
			if n < 0 || m.requests == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", float64(n)/float64(m.requests))
		}
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(c.requests, 1)) }
		fmt.Fprintf(tw, "%s\t%.0f (%.0f + %.0f)\t%.2f\t%+.0f µs\t%.0f\t%.2f\t%v\t%v\t%d\t%s\t%s\t\n", p.name, cpu, us(c.user), us(c.sys),
			medianOf(cpuRatios), bareCPU-cpu, m.rps(), medianOf(rpsRatios), round(pct(m.latencies, 0.5)), round(pct(m.latencies, 0.99)),
			errs, per(m.goroutines), per(m.switches))
	}
	_ = tw.Flush()
}

// transportFocus names the frames whose samples (their own and their
// callees') are the HTTP transport of a gateway: net/http reading and
// parsing a request and its body, writing the response, the client's
// round trip and its connection loops, header encoding, and the network
// under them (syscalls, internal/poll, the poller). A sample counts as
// transport if any frame on its stack matches. net/http.(*conn).serve
// itself is left out: the handler — the gateway — runs under it.
const transportFocus = `net/http\.\(\*conn\)\.(readRequest|finalFlush|close|closeWriteAndWait|setState)|net/http\.\(\*connReader\)|` +
	`net/http\.\(\*body\)|net/http\.\(\*bodyEOFSignal\)|net/http\.\(\*response\)|net/http\.\(\*chunkWriter\)|net/http\.checkConnErrorWriter|` +
	`net/http\.\(\*Transport\)|net/http\.\(\*persistConn\)|net/http\.persistConnWriter|net/http\.\(\*Request\)\.write|` +
	`net/http\.Header\.|net/textproto\.|^syscall\.|^internal/poll\.|^net\.|runtime\.netpoll`

// transportIgnore names frames whose samples are the gateway's own work
// even where a transport frame is on the stack: the file I/O of its
// access log and its ledger.
const transportIgnore = `internal/logsink|logAccess|internal/ledger/`

// collectorFocus names the collector's background work (its mark
// workers, sweeper and scavenger); what it costs the gateway depends on
// the heap the gateway keeps alive, not on its transport.
const collectorFocus = `runtime\.gcBgMarkWorker|runtime\.bgsweep|runtime\.bgscavenge`

// transportShare is the share of the CPU profile's samples that are
// transport (transportFocus, less transportIgnore), and the share that
// is the collector's background work (collectorFocus, less transport);
// the rest is the gateway's own work and the scheduler.
func transportShare(profile string) (transport, collector float64, err error) {
	sample := func(focus, ignore string) (part, total time.Duration, err error) {
		b, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0",
			"-focus="+focus, "-ignore="+ignore, profile).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("go tool pprof %s: %w", profile, err)
		}
		m := accounting.FindStringSubmatch(string(b))
		if m == nil {
			return 0, 0, nil // the filter matched nothing
		}
		return dur(m[1], m[2]), dur(m[3], m[4]), nil
	}
	t, total, err := sample(transportFocus, transportIgnore)
	if err != nil {
		return 0, 0, err
	}
	c, _, err := sample(collectorFocus, transportFocus)
	if err != nil {
		return 0, 0, err
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("%s: no transport samples among its samples", profile)
	}
	return float64(t) / float64(total), float64(c) / float64(total), nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
