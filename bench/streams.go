package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// streamsRun opens -streams streams at once on each path — direct, the
// bare proxy, the gateway with its durable ledger — and reports their
// time to first token, what each open stream costs the server in RSS,
// and the file descriptors it held.
func streamsRun(ctx context.Context, o options, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.ttft == 0 {
		o.ttft = 300 * time.Millisecond
	}
	if o.interval == 0 {
		o.interval = 50 * time.Millisecond
	}
	if o.tokens == 0 {
		o.tokens = 20
	}
	paths, cleanup, err := startPaths(ctx, o)
	defer cleanup()
	if err != nil {
		return err
	}
	headroom := "the default (128 MiB)"
	if o.gcHeadroom > 0 {
		headroom = fmt.Sprintf("%d MiB", o.gcHeadroom>>20)
	}
	fmt.Fprintf(out, "oncegate streams benchmark: %d streams open at once per path, mock first token after %v, %d tokens %v apart, GOMAXPROCS %d, gateways' collector headroom %s\n\n",
		o.streams, o.ttft, o.tokens, o.interval, gomaxprocs(), headroom)
	var seq atomic.Int64
	type row struct {
		r          *result
		base, peak int64
		// heldBase and heldPeak are the server's heap objects and stacks
		// before the first round and at their highest in the second.
		heldBase, heldPeak int64
		// peak2 is the server's peak RSS with twice the streams open.
		peak2   int64
		r2      *result
		fds     int
		hasProc bool
	}
	var rows []row
	for _, p := range paths {
		fmt.Fprintf(out, "%-22s ...", p.name)
		rw := row{hasProc: p.proc != nil}
		if p.proc != nil {
			rw.base, _ = p.proc.rss()
			rw.heldBase = p.proc.held()
		}
		// A first round opens the connections at every hop (a burst of
		// a thousand handshakes costs more than the relay); the second,
		// on those connections, is measured.
		tr := &http.Transport{MaxIdleConnsPerHost: 2 * o.streams, DisableCompression: true}
		client := &http.Client{Transport: tr}
		openAtOnce(ctx, client, o.streams, p, &seq)
		if p.proc != nil {
			p.proc.resetPeak()
		}
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		if p.proc != nil {
			sampler.Go(func() {
				t := time.NewTicker(20 * time.Millisecond)
				defer t.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-t.C:
						if n := p.proc.fds(); n > rw.fds {
							rw.fds = n
						}
						if i%5 == 0 { // /metrics costs the server more than /proc
							if h := p.proc.held(); h > rw.heldPeak {
								rw.heldPeak = h
							}
						}
					}
				}
			})
		}
		rw.r = openAtOnce(ctx, client, o.streams, p, &seq)
		close(stop)
		sampler.Wait()
		if p.proc != nil {
			_, rw.peak = p.proc.rss()
			// Twice as many: what one more open stream costs, without
			// what does not grow with them (the collector's headroom,
			// once filled; the runtime; the binary).
			p.proc.resetPeak()
			rw.r2 = openAtOnce(ctx, client, 2*o.streams, p, &seq)
			_, rw.peak2 = p.proc.rss()
		}
		tr.CloseIdleConnections()
		fmt.Fprintf(out, " %d streams, %d errors, %v", rw.r.requests, rw.r.errors, round(rw.r.elapsed))
		if rw.r2 != nil {
			fmt.Fprintf(out, "; then %d at once, %d errors", rw.r2.requests, rw.r2.errors)
		}
		fmt.Fprintln(out)
		rows = append(rows, rw)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tstreams\terrors\tttft p50\tttft p99\tadded ttft p50\tadded ttft p99\tpeak RSS\tRSS per open stream\tRSS per stream more\theld per open stream\tpeak fds\t")
	var direct *result
	for i, p := range paths {
		if p.name == "direct" {
			direct = rows[i].r
		}
	}
	for _, rw := range rows {
		r := rw.r
		a50, a99 := "–", "–"
		if direct != nil && r != direct {
			a50 = fmt.Sprintf("%+.1f ms", float64(pct(r.ttfts, 0.5)-pct(direct.ttfts, 0.5))/1e6)
			a99 = fmt.Sprintf("%+.1f ms", float64(pct(r.ttfts, 0.99)-pct(direct.ttfts, 0.99))/1e6)
		}
		peak, per, more, held, fds := "–", "–", "–", "–", "–"
		if rw.hasProc {
			peak = fmt.Sprintf("%.0f MiB", float64(rw.peak)/(1<<20))
			per = fmt.Sprintf("%.1f KiB", float64(rw.peak-rw.base)/float64(o.streams)/1024)
			more = fmt.Sprintf("%.1f KiB", float64(rw.peak2-rw.peak)/float64(o.streams)/1024)
			if rw.heldBase >= 0 && rw.heldPeak > 0 {
				held = fmt.Sprintf("%.1f KiB", float64(rw.heldPeak-rw.heldBase)/float64(o.streams)/1024)
			}
			fds = strconv.Itoa(rw.fds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.requests, r.errors+errorsOf(rw.r2),
			round(pct(r.ttfts, 0.5)), round(pct(r.ttfts, 0.99)), a50, a99, peak, per, more, held, fds)
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\nEach path: one round opens the connections at every hop, a second round on them is measured.")
	fmt.Fprintln(out, "RSS per open stream: (the server's peak RSS during the measured round − its RSS before the first) ÷ streams")
	fmt.Fprintln(out, "RSS per stream more: (its peak RSS in a third round of twice the streams − its peak in the measured round) ÷ streams: what one more open stream costs, the collector's headroom left out (errors: both rounds')")
	fmt.Fprintln(out, "held per open stream: the same for its heap objects and goroutine stacks (runtime/metrics, every 100 ms): what the streams hold, without the collector's headroom")
	return nil
}

// openAtOnce opens n streams on p together (each on its own connection,
// all released at one moment) and reads each to its end.
func openAtOnce(ctx context.Context, client *http.Client, n int, p path, seq *atomic.Int64) *result {
	url := p.url + "/v1/chat/completions"
	r := &result{name: p.name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	var errs atomic.Int64
	for range n {
		wg.Go(func() {
			body := []byte(`{"model":"` + p.model + `","stream":true,"messages":[{"role":"user","content":"Hold a stream open, request ` +
				strconv.FormatInt(seq.Add(1), 10) + `."}]}`)
			<-gate
			t0 := time.Now()
			first, err := once(client, url, body, p.auth, true)
			if err != nil || ctx.Err() != nil {
				if errs.Add(1) <= 3 {
					fmt.Fprintf(os.Stderr, "\n%s: %v", p.name, err)
				}
				return
			}
			mu.Lock()
			r.ttfts = append(r.ttfts, first.Sub(t0))
			r.latencies = append(r.latencies, time.Since(t0))
			r.requests++
			mu.Unlock()
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	r.elapsed, r.errors = time.Since(start), errs.Load()
	return r
}

// errorsOf is r's errors (none for no round).
func errorsOf(r *result) int64 {
	if r == nil {
		return 0
	}
	return r.errors
}
