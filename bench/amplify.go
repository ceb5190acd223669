package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
)

// amplifyConfig is oncegate's side of the amplification benchmark. The
// primary route (on provider "primary", the mock whose calls fail) has
// three attempts; alias "bench" has it alone, "bench-fallback" adds a
// fallback route on a second, healthy provider, and
// "bench-fallback-last" does too with the primary capped at two attempts,
// so that the alias's third is always left for the fallback. The retry
// budget is the run's (by default 0.1 + 10/s over 10 s); the breaker opens
// at 75 % failures, so that a half-broken route without a fallback is
// still tried.
const amplifyConfig = `
listen: 127.0.0.1:0
tenants: [{id: bench, api_key_env: BENCH_KEY, budget: {requests_per_minute: 100000000, cost_usd_per_day: 1000000}}]
providers:
  - {id: primary, type: openai, base_url: "PRIMARY/v1", timeouts: {connect: 2s, first_byte: 30s, idle: 30s}}
  - {id: secondary, type: openai, base_url: "SECONDARY/v1", timeouts: {connect: 2s, first_byte: 30s, idle: 30s}}
routes:
  - {id: primary, provider: primary, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}}
  - {id: primary-2, provider: primary, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}}
  - {id: fallback, provider: secondary, model: bench-model, behavior_class: c, data_boundary: local, max_attempts: 3,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 4096}}
models:
  - {name: bench, routes: [primary], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, deadline: 60s}}
  - {name: bench-fallback, routes: [primary, fallback], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, deadline: 60s}}
  - {name: bench-fallback-last, routes: [primary-2, fallback], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, deadline: 60s}}
retry_budget: {ratio: RATIO, min_per_second: FLOOR, window: WINDOW}
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

// The stacks the amplification table compares (-stacks), and the alias
// each oncegate stack is asked for.
const (
	stackNaive        = "naive"
	stackOncegate     = "oncegate"
	stackFallback     = "fallback"
	stackFallbackLast = "fallback-last"
)

var amplifyAliases = map[string]string{stackOncegate: "bench", stackFallback: "bench-fallback", stackFallbackLast: "bench-fallback-last"}

// parseStacks reads -stacks: stack names, comma-separated.
func parseStacks(s string) ([]string, error) {
	var stacks []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if _, ok := amplifyAliases[f]; !ok && f != stackNaive {
			return nil, fmt.Errorf("-stacks: %q is none of naive, oncegate, fallback, fallback-last", f)
		}
		stacks = append(stacks, f)
	}
	return stacks, nil
}

// amplification prints, at each -failures rate of the primary provider,
// what one user action costs upstream — in all and on the primary — and
// how often it succeeds, through a naive retry stack, through oncegate
// with the primary alone, and through oncegate with a fallback route on a
// second, healthy provider; and the primary's retries beside the bound its
// retry budget sets over the run.
func amplification(ctx context.Context, o options, out io.Writer) error {
	rates, err := parseFailures(o.failures)
	if err != nil {
		return err
	}
	stacks, err := parseStacks(o.stacks)
	if err != nil {
		return err
	}
	b := o.budget
	fmt.Fprintf(out, "retry amplification: %d user actions per run, concurrency %d, mock ttft %v\n", o.actions, o.concurrency, o.ttft)
	fmt.Fprintln(out, "naive: client 3 attempts (ignores x-should-retry) × gateway 3 attempts, no budget, no breaker, the primary alone")
	fmt.Fprintf(out, "oncegate: client 3 attempts (obeys x-should-retry, as the official SDKs do) × oncegate (max_attempts 3, retry budget %g + %g/s over %v, breaker at 75 %%)\n",
		b.Ratio, b.MinPerSecond, b.Window)
	fmt.Fprintln(out, "fallback: oncegate with a fallback route on a second, healthy provider (the primary route keeps max_attempts 3)")
	fmt.Fprintln(out, "fallback-last: the same with the primary route at max_attempts 2, so the alias's third attempt is left for the fallback")
	fmt.Fprintln(out, "failure: of the primary provider's calls; retries: calls on the primary after a user action's first there;")
	fmt.Fprintln(out, "bound: what the primary's budget admits over the run (ratio × firsts + min_per_second × window, per window the run spans)")
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "failure\tstack\tsucceeded\tcalls/action\ton primary\tprimary retries\tbound\trun\tp50\tp99\t")
	for _, rate := range rates {
		for _, stack := range stacks {
			r, err := amplifyRun(ctx, o, stack, rate)
			if err != nil {
				return err
			}
			fmt.Fprintln(tw, r.row(o, stack, rate))
		}
	}
	return tw.Flush()
}

// parseFailures reads -failures: percentages, comma-separated.
func parseFailures(s string) ([]float64, error) {
	var rates []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%")), 64)
		if err != nil || v < 0 || v > 100 {
			return nil, fmt.Errorf("-failures: %q is not a percentage from 0 to 100", f)
		}
		rates = append(rates, v/100)
	}
	return rates, nil
}

type amplifyResult struct {
	ok int64
	// calls reached either provider; primary the failing one, and
	// primaryFirsts is how many user actions reached it at all (its
	// distinct idempotency keys; for the naive stack, which sends none,
	// every action).
	calls, primary, primaryFirsts int64
	elapsed                       time.Duration
	latencies                     []time.Duration
}

// row is one line of the table.
func (r *amplifyResult) row(o options, stack string, rate float64) string {
	n := float64(o.actions)
	retries, bound := fmt.Sprint(r.primary-r.primaryFirsts), "—"
	if stack != stackNaive {
		bound = fmt.Sprintf("%.0f", budgetBound(o.budget, r.primaryFirsts, r.elapsed))
	}
	return fmt.Sprintf("%.0f%%\t%s\t%.1f%%\t%.2f\t%.2f\t%s\t%s\t%v\t%v\t%v\t", rate*100, stack, 100*float64(r.ok)/n,
		float64(r.calls)/n, float64(r.primary)/n, retries, bound, r.elapsed.Round(100*time.Millisecond),
		round(pct(r.latencies, 0.5)), round(pct(r.latencies, 0.99)))
}

// budgetBound is how many retries a provider's budget admits over a run
// of elapsed with firsts first attempts: ratio × firsts, plus the floor
// (min_per_second × window) once for every stretch of the run its rolling
// window covers whole — at least nine tenths of a window, as its oldest
// tenth ages out at once (internal/breaker). A run shorter than that gets
// exactly ratio × firsts + min_per_second × window; a longer one about
// that (the first attempts late in one stretch count for the next too).
func budgetBound(b breaker.BudgetConfig, firsts int64, elapsed time.Duration) float64 {
	windows := math.Max(1, math.Ceil(float64(elapsed)/(0.9*float64(b.Window))))
	return b.Ratio*float64(firsts) + b.MinPerSecond*b.Window.Seconds()*windows
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

// serveMock serves a mock provider until ctx ends.
func serveMock(ctx context.Context, cfg mock.Config) (*mock.Mock, string, error) {
	m := mock.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	go func() { _ = m.Serve(ctx, ln) }()
	return m, "http://" + ln.Addr().String(), nil
}

// amplifyRun runs o.actions user actions through stack against two mock
// providers: the primary failing rate of its calls, the secondary
// healthy (only oncegate + fallback has a route on it).
func amplifyRun(ctx context.Context, o options, stack string, rate float64) (*amplifyResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	primary, primaryURL, err := serveMock(ctx, mock.Config{TTFT: o.ttft, Tokens: o.tokens, Script: failing(rate, o.actions*naiveAttempts*naiveAttempts)})
	if err != nil {
		return nil, err
	}
	secondary, secondaryURL, err := serveMock(ctx, mock.Config{TTFT: o.ttft, Tokens: o.tokens})
	if err != nil {
		return nil, err
	}
	url, model, obey := "", "bench-model", stack != stackNaive
	if stack == stackNaive {
		if url, err = serveNaive(ctx, primaryURL+"/v1/chat/completions"); err != nil {
			return nil, err
		}
	} else {
		if url, err = serveAmplifyGateway(ctx, o.budget, primaryURL, secondaryURL); err != nil {
			return nil, err
		}
		model = amplifyAliases[stack]
	}
	res := &amplifyResult{}
	start := time.Now()
	res.ok, res.latencies = userActions(ctx, o, url+"/v1/chat/completions", model, obey)
	res.elapsed = time.Since(start)
	ps := primary.Stats()
	res.primary, res.calls = ps.Requests, ps.Requests+secondary.Stats().Requests
	res.primaryFirsts = int64(len(ps.ByIdempotencyKey))
	if stack == stackNaive {
		res.primaryFirsts = int64(o.actions)
	}
	return res, nil
}

// serveNaive serves naiveGateway in front of upstream until ctx ends.
func serveNaive(ctx context.Context, upstream string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: naiveGateway(upstream)}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// serveAmplifyGateway serves amplifyConfig with budget b in front of the
// two mocks until ctx ends.
func serveAmplifyGateway(ctx context.Context, b breaker.BudgetConfig, primaryURL, secondaryURL string) (string, error) {
	cfg := strings.NewReplacer("PRIMARY", primaryURL, "SECONDARY", secondaryURL, "RATIO", strconv.FormatFloat(b.Ratio, 'g', -1, 64),
		"FLOOR", strconv.FormatFloat(b.MinPerSecond, 'g', -1, 64), "WINDOW", b.Window.String()).Replace(amplifyConfig)
	pol, err := policy.Parse("amplify.yaml", []byte(cfg))
	if err != nil {
		return "", err
	}
	secrets, err := pol.Config.ResolveSecrets(func(string) (string, bool) { return benchKey, true })
	if err != nil {
		return "", err
	}
	return startGateway(ctx, pol, secrets, nil)
}

// userActions runs o.actions user actions on o.concurrency clients against
// url and model: how many succeeded, and how long each took.
func userActions(ctx context.Context, o options, url, model string, obey bool) (int64, []time.Duration) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency * 2}}
	defer client.CloseIdleConnections()
	var next, ok atomic.Int64
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
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
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok.Load(), latencies
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
