package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// path is one way to the mock: directly, or through a server in front of
// it.
type path struct {
	name, url, model string
	auth             bool
	proc             *child       // the server's process (nil: direct or in process)
	roundTrips       func() int64 // the Redis round trips of an in-process replica so far
}

// run is the throughput table: every path in turn, -rounds times, each
// round -requests distinct requests at -concurrency; then each path from
// a lone client.
func run(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.tokens == 0 {
		o.tokens = 32
	}
	paths, cleanup, err := startPaths(ctx, o)
	defer cleanup()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "oncegate load benchmark: %d distinct requests per path and round, %d rounds, concurrency %d, mock ttft %v, %d tokens, GOMAXPROCS %d\n",
		o.requests, o.rounds, o.concurrency, o.ttft, o.tokens, gomaxprocs())
	fmt.Fprintln(out, "(load generator and mock in this process; the bare proxy and each gateway in a process of its own)")
	fmt.Fprintln(out)
	var seq atomic.Int64
	rounds := map[string][]*result{}
	again := map[string][]*result{} // the repeated questions' rounds
	for _, p := range paths {
		// Warm up: connections, caches, the ledger's first pages.
		load(ctx, o.concurrency, min(o.requests, 2000), p, false, &seq)
	}
	for round := range o.rounds {
		for _, p := range paths {
			if !o.noDistinct {
				fmt.Fprintf(out, "round %d: %-22s ...", round+1, p.name)
				r := measure(p, func() *result { return load(ctx, o.concurrency, o.requests, p, false, &seq) })
				fmt.Fprintf(out, " %6.0f requests/s, %d errors\n", r.rps(), r.errors)
				rounds[p.name] = append(rounds[p.name], r)
			}
			if !o.again {
				continue
			}
			// The same o.requests questions every round: from the
			// second, each arrives after its twin finished and
			// replaces it (a keyless body, no replay window).
			fmt.Fprintf(out, "round %d: %-22s ...", round+1, p.name+", again")
			var n atomic.Int64
			r := measure(p, func() *result {
				return loadBodies(ctx, o.concurrency, o.requests, p, false, &n, "Ask the same question again, number ")
			})
			fmt.Fprintf(out, " %6.0f requests/s, %d errors\n", r.rps(), r.errors)
			again[p.name] = append(again[p.name], r)
		}
	}
	lone := map[string]*result{}
	if o.lone > 0 {
		for _, p := range paths {
			fmt.Fprintf(out, "lone client: %-19s ...", p.name)
			r := load(ctx, 1, o.lone, p, false, &seq)
			fmt.Fprintf(out, " p50 %v\n", round(pct(r.latencies, 0.5)))
			lone[p.name] = r
		}
	}
	fmt.Fprintln(out)
	if o.noDistinct {
		report(out, paths, again, lone) // the only rounds
	} else {
		report(out, paths, rounds, lone)
	}
	fmt.Fprintln(out)
	drift(out, paths, rounds, again)
	return nil
}

// measure runs one round on p, with the server's CPU, goroutines,
// switches and Redis round trips over it.
func measure(p path, round func() *result) *result {
	var u0, s0 time.Duration
	var g0, w0 int64
	if p.proc != nil {
		u0, s0 = p.proc.cpu()
		g0, w0 = p.proc.goroutines(), p.proc.switches()
	}
	var rt0 int64
	if p.roundTrips != nil {
		rt0 = p.roundTrips()
	}
	r := round()
	if p.proc != nil {
		u1, s1 := p.proc.cpu()
		r.user, r.sys = u1-u0, s1-s0
		r.goroutines, r.switches = delta(g0, p.proc.goroutines()), delta(w0, p.proc.switches())
	}
	if p.roundTrips != nil {
		r.redisRTs = roundTrips(p.roundTrips()-rt0, r.requests)
	}
	return r
}

// drift prints, for each workload, each path's throughput round by round
// as a share of the bare proxy's in the same round, and the last round's
// share over the first's: whether the gateway slows as its ledger fills
// (distinct questions) or as finished requests are replaced by the same
// questions asked again (repeated).
func drift(out io.Writer, paths []path, rounds, again map[string][]*result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	n := max(len(rounds["bare proxy"]), len(again["bare proxy"]))
	if n == 0 {
		return
	}
	fmt.Fprint(tw, "workload\tpath\t")
	for i := range n {
		fmt.Fprintf(tw, "round %d ÷ bare proxy\t", i+1)
	}
	fmt.Fprintln(tw, "round N ÷ round 1\tserver CPU/request, round 1 → N\t")
	for _, w := range []struct {
		name string
		rs   map[string][]*result
	}{{"distinct", rounds}, {"repeated", again}} {
		proxy := w.rs["bare proxy"] // the same round of the same workload
		for _, p := range paths {
			rs := w.rs[p.name]
			if len(rs) == 0 || len(rs) != len(proxy) || p.name == "bare proxy" || p.name == "direct" {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t", w.name, p.name)
			for i, r := range rs {
				fmt.Fprintf(tw, "%.2f\t", r.rps()/proxy[i].rps())
			}
			first, last := rs[0].rps()/proxy[0].rps(), rs[len(rs)-1].rps()/proxy[len(rs)-1].rps()
			cpu := "–"
			if p.proc != nil && rs[0].requests > 0 && rs[len(rs)-1].requests > 0 {
				us := func(r *result) float64 { return float64((r.user + r.sys).Microseconds()) / float64(r.requests) }
				cpu = fmt.Sprintf("%.0f → %.0f µs", us(rs[0]), us(rs[len(rs)-1]))
			}
			fmt.Fprintf(tw, "%.2f\t%s\t\n", last/first, cpu)
		}
	}
	_ = tw.Flush()
}

// startPaths starts the mock (its latency from o) and what the paths in
// front of it need: the bare proxy, the gateway binary with the in-memory
// ledger and with the SQLite ledger at each durability, and
// (-replicated) an in-process replica. The mock stops with ctx, the rest
// with cleanup.
func startPaths(ctx context.Context, o options) ([]path, func(), error) {
	var stops []func()
	cleanup := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	_, mockURL, err := startMock(ctx, o.ttft, o.interval, o.tokens)
	if err != nil {
		return nil, cleanup, err
	}
	dir, err := os.MkdirTemp("", "oncegate-bench")
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	want := func(name string) bool {
		for _, w := range strings.Split(o.only, ",") {
			if strings.Contains(name, w) {
				return true
			}
		}
		return false
	}
	paths := []path{}
	if want("direct") {
		paths = append(paths, path{name: "direct", url: mockURL, model: "bench-model"})
	}
	if want("bare proxy") {
		px, err := startProxy(mockURL, dir)
		if err != nil {
			return nil, cleanup, err
		}
		stops = append(stops, px.stop)
		paths = append(paths, path{name: "bare proxy", url: px.url, model: "bench-model", proc: px})
	}
	gateways := []struct{ name, extra, preload string }{
		{"oncegate memory", "store: memory://\n", ""},
		{"oncegate full", "store: sqlite://ledger-full.db\nledger: {sync: full}\n", ""},
		{"oncegate normal", "store: sqlite://ledger-normal.db\nledger: {sync: normal}\n", ""},
	}
	if o.steady > 0 {
		// The same gateways on a ledger that has run for a day.
		gateways = append(gateways,
			struct{ name, extra, preload string }{steadyName("oncegate full", o.steady), "store: sqlite://ledger-full-steady.db\nledger: {sync: full}\n", "ledger-full-steady.db"},
			struct{ name, extra, preload string }{steadyName("oncegate normal", o.steady), "store: sqlite://ledger-normal-steady.db\nledger: {sync: normal}\n", "ledger-normal-steady.db"})
	}
	var bin, steady string
	for _, gw := range gateways {
		if !want(gw.name) {
			continue
		}
		if bin == "" {
			if bin, err = buildGateway(ctx, dir); err != nil {
				return nil, cleanup, err
			}
		}
		if gw.preload != "" {
			if steady == "" {
				if steady, err = steadyLedger(ctx, bin, o.steadyCache, dir, mockURL, o.steady, os.Stdout); err != nil {
					return nil, cleanup, fmt.Errorf("preload a ledger: %w", err)
				}
			}
			if err := copyFile(steady, filepath.Join(dir, gw.preload)); err != nil {
				return nil, cleanup, err
			}
			// A gateway that has run for a day finds its ledger's pages
			// in the operating system's cache; a copy made a moment ago
			// would be read from the disk.
			if err := readAll(filepath.Join(dir, gw.preload)); err != nil {
				return nil, cleanup, err
			}
		}
		extra := gw.extra
		if o.gcHeadroom > 0 {
			extra += fmt.Sprintf("limits: {gc_headroom_bytes: %d}\n", o.gcHeadroom)
		}
		c, err := startServe(bin, dir, o.profiles, o.traces, gw.name, mockURL, extra)
		if err != nil {
			return nil, cleanup, err
		}
		stops = append(stops, c.stop)
		paths = append(paths, path{name: gw.name, url: c.url, model: "bench", auth: true, proc: c})
	}
	if o.replicated && want("replicated") {
		pol, secrets, err := benchPolicy(mockURL)
		if err != nil {
			return nil, cleanup, err
		}
		sh, err := newShared(ctx, o.postgres, o.redis)
		if err != nil {
			return nil, cleanup, err
		}
		stops = append(stops, sh.drop)
		rep, err := startReplica(ctx, pol, secrets, sh)
		if err != nil {
			return nil, cleanup, err
		}
		paths = append(paths, path{name: "oncegate replica (in process)", url: rep.url, model: "bench", auth: true, roundTrips: rep.co.RoundTrips})
	}
	return paths, cleanup, nil
}

// load sends n distinct requests on p from c clients, each sending its
// next request as soon as its last one finished.
func load(ctx context.Context, c, n int, p path, stream bool, seq *atomic.Int64) *result {
	return loadBodies(ctx, c, n, p, stream, seq, "Benchmark the relay, request ")
}

// loadBodies is load with the questions text + the next number of seq:
// the same seq and text ask the same questions again.
func loadBodies(ctx context.Context, c, n int, p path, stream bool, seq *atomic.Int64, text string) *result {
	tr := &http.Transport{MaxIdleConns: c * 2, MaxIdleConnsPerHost: c * 2, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	r := &result{name: p.name}
	url := p.url + "/v1/chat/completions"
	var mu sync.Mutex
	var left atomic.Int64
	left.Store(int64(n))
	var requests, errs atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			var lat, ttft []time.Duration
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				// A distinct body per request: identical ones would join
				// in flight and flatter the gateway.
				body := []byte(`{"model":"` + p.model + `","stream":` + strconv.FormatBool(stream) +
					`,"messages":[{"role":"user","content":"` + text + strconv.FormatInt(seq.Add(1), 10) + `."}]}`)
				t0 := time.Now()
				first, err := once(client, url, body, p.auth, stream)
				if err != nil {
					if errs.Add(1) <= 3 {
						fmt.Fprintf(os.Stderr, "\n%s: %v", p.name, err)
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
		})
	}
	wg.Wait()
	r.elapsed, r.requests, r.errors = time.Since(start), requests.Load(), errs.Load()
	return r
}

// median is the round with the median throughput.
func median(rs []*result) *result {
	if len(rs) == 0 {
		return &result{elapsed: 1}
	}
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b *result) int {
		switch {
		case a.rps() < b.rps():
			return -1
		case a.rps() > b.rps():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// delta is after - before, or -1 if either is unknown.
func delta(before, after int64) int64 {
	if before < 0 || after < 0 {
		return -1
	}
	return after - before
}

// report prints the throughput table: each path's median round, its
// throughput as a share of the bare proxy's, and the latency it adds for
// a lone client over the direct path.
func report(out io.Writer, paths []path, rounds map[string][]*result, lone map[string]*result) {
	var proxy, direct *result
	if rs := rounds["bare proxy"]; len(rs) > 0 {
		proxy = median(rs)
	}
	direct = lone["direct"]
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\trequests/s (median round)\t÷ bare proxy\tp50\tp99\terrors\tserver CPU/request (user + kernel)\tgoroutines/request\tswitches/request\tlone p50\tadded lone p50\t")
	for _, p := range paths {
		r := median(rounds[p.name])
		ratio := "–"
		if proxy != nil {
			ratio = fmt.Sprintf("%.2f", r.rps()/proxy.rps())
		}
		var errs int64
		for _, x := range rounds[p.name] {
			errs += x.errors
		}
		lp50, added := "–", "–"
		if l := lone[p.name]; l != nil {
			lp50 = round(pct(l.latencies, 0.5)).String()
			if direct != nil {
				added = fmt.Sprintf("%+.2f ms", float64(pct(l.latencies, 0.5)-pct(direct.latencies, 0.5))/1e6)
			}
		}
		cpu, gor, sw := "–", "–", "–"
		if p.proc != nil && r.requests > 0 {
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.requests) }
			cpu = fmt.Sprintf("%.0f µs (%.0f + %.0f)", us(r.user+r.sys), us(r.user), us(r.sys))
			per := func(n int64) string {
				if n < 0 {
					return "–"
				}
				return fmt.Sprintf("%.1f", float64(n)/float64(r.requests))
			}
			gor, sw = per(r.goroutines), per(r.switches)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%v\t%v\t%d\t%s\t%s\t%s\t%s\t%s\t\n", p.name, r.rps(), ratio,
			round(pct(r.latencies, 0.5)), round(pct(r.latencies, 0.99)), errs, cpu, gor, sw, lp50, added)
	}
	_ = tw.Flush()
	for _, p := range paths {
		if r := median(rounds[p.name]); r.redisRTs != "" {
			fmt.Fprintf(out, "%s: %s Redis round trips per request\n", p.name, r.redisRTs)
		}
	}
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
		b, _ := io.ReadAll(io.LimitReader(res.Body, 300))
		return time.Time{}, fmt.Errorf("status %d: %s", res.StatusCode, b)
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
			if first.IsZero() {
				return first, fmt.Errorf("the stream ended before its first token")
			}
			return first, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return first, err
		}
	}
}
