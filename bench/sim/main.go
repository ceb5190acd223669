// Command sim runs the fleet simulation of internal/sim at scale: by
// default 100 gateway replicas and 1,000,000 users over ten minutes, a
// provider with room for 1.5 times the load that fails completely for two
// minutes and is then browned out for one — through a naive retry stack
// and through oncegate's real engine, breakers and fleet retry budget. It
// prints the comparison and draws load over time as a PNG.
//
//	go run ./bench/sim -out docs/sim.png
package main

import (
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/sim"
)

func main() {
	replicas := flag.Int("replicas", 100, "gateway replicas (sharing breakers and the retry budget, as with Redis)")
	users := flag.Int("users", 1_000_000, "users, one action each, arriving uniformly over -arrivals")
	arrivals := flag.Duration("arrivals", 10*time.Minute, "how long users keep arriving")
	outage := flag.Duration("outage", 2*time.Minute, "how long the provider fails every call, from -arrivals/5 on")
	brownout := flag.Duration("brownout", time.Minute, "how long after the outage 30 % of calls still fail")
	headroom := flag.Float64("headroom", 1.5, "the provider's capacity as a multiple of the users' arrival rate")
	seed := flag.Uint64("seed", 1, "the simulation's seed (the same seed, the same result)")
	out := flag.String("out", "", "write the load-over-time plot to this PNG file")
	flag.Parse()
	if err := run(os.Stdout, *replicas, *users, *arrivals, *outage, *brownout, *headroom, *seed, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, replicas, users int, arrivals, outage, brownout time.Duration, headroom float64, seed uint64, out string) error {
	pol, err := policy.Parse("fleet.yaml", []byte(sim.Fleet))
	if err != nil {
		return err
	}
	start := arrivals / 5
	prov := sim.Provider{Capacity: int(headroom * float64(users) / arrivals.Seconds()), OutageStart: start, OutageEnd: start + outage,
		BrownoutEnd: start + outage + brownout, BrownoutFailure: 0.3, Latency: 800 * time.Millisecond, FailLatency: 50 * time.Millisecond}
	fmt.Fprintf(w, "fleet simulation: %d replicas, %d users over %v, provider capacity %d calls/s, outage %v–%v, brown-out (30 %% failures) to %v, seed %d\n\n",
		replicas, users, arrivals, prov.Capacity, prov.OutageStart, prov.OutageEnd, prov.BrownoutEnd, seed)
	var results []*sim.Result
	for _, stack := range []sim.Stack{sim.Naive, sim.Oncegate} {
		t0 := time.Now()
		r, err := sim.Run(sim.Config{Stack: stack, Replicas: replicas, Users: users, Arrivals: arrivals, Horizon: arrivals + 30*time.Second,
			Provider: prov, Policy: pol, Patience: 60 * time.Second, PriceUSD: 0.002, Seed: seed})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%-9s simulated in %v\n", stack, time.Since(t0).Round(time.Millisecond))
		results = append(results, r)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stack\tupstream calls\tcalls/action, outage\tcalls/action, after\trecovery after the return\tanswered\tfailed\tdeadline misses\tspend\t")
	for _, r := range results {
		rec := "never"
		if r.Recovery >= 0 {
			rec = r.Recovery.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%d\t%d\t%d\t$%.0f\t\n", r.Config.Stack, r.Calls, r.CallsPerActionOutage, r.CallsPerActionAfter,
			rec, r.Succeeded, r.Failed, r.Missed, r.SpendUSD)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	series := func(r *sim.Result, label string, c color.RGBA, f func(sim.Second) int) sim.Series {
		s := sim.Series{Label: label, Color: c}
		for _, x := range r.Seconds {
			s.Values = append(s.Values, float64(f(x)))
		}
		return s
	}
	calls := func(x sim.Second) int { return x.Calls }
	var buf bytes.Buffer
	title := fmt.Sprintf("upstream calls per second: %d replicas, %d users, provider out from %v to %v", replicas, users, prov.OutageStart, prov.OutageEnd)
	capacity := sim.Series{Label: fmt.Sprintf("provider capacity (%d/s)", prov.Capacity), Color: color.RGBA{120, 120, 120, 255}}
	for range results[0].Seconds {
		capacity.Values = append(capacity.Values, float64(prov.Capacity))
	}
	if err := sim.Plot(&buf, title, prov, []sim.Series{
		series(results[0], "naive stack: upstream calls/s", color.RGBA{214, 39, 40, 255}, calls),
		series(results[1], "oncegate: upstream calls/s", color.RGBA{31, 119, 180, 255}, calls),
		series(results[1], "user actions begun/s", color.RGBA{44, 160, 44, 255}, func(x sim.Second) int { return x.Actions }),
		capacity,
	}); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
