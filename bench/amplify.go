package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// amplifyConfig is oncegate's side of the amplification benchmark: one
// route, three attempts, the default fleet retry budget, and a breaker
// that opens at 75 % failures (so that a half-broken route without a
// fallback is still tried).
const amplifyConfig = benchPreamble + `
routes:
  - {id: mock, provider: mock, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}}
models:
  - {name: bench, routes: [mock], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, deadline: 60s}}
retry_budget: {ratio: 0.1, min_per_second: 10, window: 10s}
breaker: {failure_ratio: 0.75, min_requests: 20, window: 10s, open_for: 5s, half_open_probes: 3}
`

// Timings of the naive stack: a gateway that retries every 5xx three
// times with 20 ms and 40 ms backoff, behind a client that does the same
// with 100 ms and 200 ms (an SDK's defaults, scaled down) and ignores
// x-should-retry.
const (
	naiveAttempts    = 3
	naiveGatewayBase = 20 * time.Millisecond
	clientBase       = 100 * time.Millisecond
)

// amplification prints, for 0 %, 50 % and 100 % upstream failure, what
// one user action costs upstream and how long it takes, through a naive
// retry stack and through oncegate.
func amplification(ctx context.Context, o options, out io.Writer) error {
	fmt.Fprintf(out, "retry amplification: %d user actions per run, concurrency %d, mock ttft %v\n", o.actions, o.concurrency, o.ttft)
	fmt.Fprintln(out, "naive: client 3 attempts (ignores x-should-retry) × gateway 3 attempts, no budget, no breaker")
	fmt.Fprintln(out, "oncegate: client 3 attempts (obeys x-should-retry, as the official SDKs do) × oncegate (max_attempts 3, retry budget 0.1 + 10/s, breaker at 75 %)")
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "failure\tstack\tupstream calls\tcalls/action\tsucceeded\tp50\tp99\t")
	for _, rate := range []float64{0, 0.5, 1} {
		for _, stack := range []string{"naive", "oncegate"} {
			r, err := amplifyRun(ctx, o, stack, rate)
			if err != nil {
				return err
			}
			fmt.Fprintf(tw, "%.0f%%\t%s\t%d\t%.2f\t%.1f%%\t%v\t%v\t\n", rate*100, stack, r.calls, float64(r.calls)/float64(o.actions),
				100*float64(r.ok)/float64(o.actions), round(pct(r.latencies, 0.5)), round(pct(r.latencies, 0.99)))
		}
	}
	return tw.Flush()
}

type amplifyResult struct {
	calls     int64
	ok        int64
	latencies []time.Duration
}

// failing is a mock script failing each call with probability rate, by a
// seeded draw per call number, with a 503.
func failing(rate float64, calls int) mock.Script {
	if rate <= 0 {
		return mock.Script{}
	}
	fault := mock.Fault{Type: mock.FaultStatus, Status: 503}
	if rate >= 1 {
		return mock.Script{Rules: []mock.Rule{{Fault: fault}}}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var which []int
	for n := 1; n <= calls; n++ {
		if r.Float64() < rate {
			which = append(which, n)
		}
	}
	return mock.Script{Rules: []mock.Rule{{Calls: which, Fault: fault}}}
}

func amplifyRun(ctx context.Context, o options, stack string, rate float64) (*amplifyResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := mock.New(mock.Config{TTFT: o.ttft, Tokens: o.tokens, Script: failing(rate, o.actions*naiveAttempts*naiveAttempts)})
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = m.Serve(ctx, mln) }()
	mockURL := "http://" + mln.Addr().String()
	var url, model string
	obey := false
	switch stack {
	case "naive":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: naiveGateway(mockURL + "/v1/chat/completions")}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		url, model = "http://"+ln.Addr().String()+"/v1/chat/completions", "bench-model"
	default:
		pol, err := policy.Parse("amplify.yaml", []byte(strings.ReplaceAll(amplifyConfig, "MOCK", mockURL)))
		if err != nil {
			return nil, err
		}
		secrets, err := pol.Config.ResolveSecrets(func(string) (string, bool) { return benchKey, true })
		if err != nil {
			return nil, err
		}
		gwURL, err := startGateway(ctx, pol, secrets, nil)
		if err != nil {
			return nil, err
		}
		url, model, obey = gwURL+"/v1/chat/completions", "bench", true
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2}}
	res := &amplifyResult{}
	var next, ok atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(o.actions) {
					return
				}
				body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"user action ` + strconv.FormatInt(i, 10) + `"}]}`)
				start := time.Now()
				if clientCall(ctx, client, url, body, obey) {
					ok.Add(1)
				}
				mu.Lock()
				res.latencies = append(res.latencies, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.calls, res.ok = m.Stats().Requests, ok.Load()
	return res, nil
}

// clientCall is one user action through a client that makes up to three
// attempts on a 5xx or 429 — unless obey is set and the response says
// x-should-retry: false.
func clientCall(ctx context.Context, c *http.Client, url string, body []byte, obey bool) bool {
	for try := 0; try < naiveAttempts; try++ {
		if try > 0 && !sleep(ctx, clientBase<<(try-1)) {
			return false
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+benchKey)
		res, err := c.Do(req)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == 200 {
			return true
		}
		if res.StatusCode < 500 && res.StatusCode != 429 || obey && res.Header.Get("x-should-retry") == "false" {
			return false
		}
	}
	return false
}

// naiveGateway forwards to upstream and retries every 5xx up to three
// attempts: a gateway that retries without a budget or a breaker.
func naiveGateway(upstream string) http.Handler {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		status, data := http.StatusBadGateway, []byte(`{"error":{"message":"no answer"}}`)
		for try := 0; try < naiveAttempts; try++ {
			if try > 0 && !sleep(r.Context(), naiveGatewayBase<<(try-1)) {
				return
			}
			req, _ := http.NewRequestWithContext(r.Context(), "POST", upstream, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := c.Do(req)
			if err != nil {
				continue
			}
			data, _ = io.ReadAll(res.Body)
			res.Body.Close()
			if status = res.StatusCode; status < 500 {
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(data)
	})
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
