// Command sim runs the fleet simulation of internal/sim at scale: by
// default 100 gateway replicas and 1,000,000 users over ten minutes, a
// provider with room for 1.5 times the load that fails completely for two
// minutes and is then browned out for one — through a naive retry stack,
// through oncegate's real engine, breakers and retry budget with that
// provider alone, and through oncegate with a fallback route on a second,
// healthy provider. It prints the comparison and draws load over time as
// PNGs.
//
//	go run ./bench/sim -out docs/sim.png -fallback-out docs/sim-fallback.png
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

// options are the command's flags.
type options struct {
	replicas, users            int
	arrivals, outage, brownout time.Duration
	headroom                   float64
	primaryAttempts            int
	seed                       uint64
	out, fallbackOut           string
}

func main() {
	var o options
	flag.IntVar(&o.replicas, "replicas", 100, "gateway replicas (sharing breakers and the retry budgets, as with Redis)")
	flag.IntVar(&o.users, "users", 1_000_000, "users, one action each, arriving uniformly over -arrivals")
	flag.DurationVar(&o.arrivals, "arrivals", 10*time.Minute, "how long users keep arriving")
	flag.DurationVar(&o.outage, "outage", 2*time.Minute, "how long the provider fails every call, from -arrivals/5 on")
	flag.DurationVar(&o.brownout, "brownout", time.Minute, "how long after the outage 30 % of calls still fail")
	flag.Float64Var(&o.headroom, "headroom", 1.5, "each provider's capacity as a multiple of the users' arrival rate")
	flag.IntVar(&o.primaryAttempts, "fallback-primary-attempts", 2, "with a fallback: the primary route's max_attempts, of the alias's 3 (2 leaves the last for the fallback)")
	flag.Uint64Var(&o.seed, "seed", 1, "the simulation's seed (the same seed, the same result)")
	flag.StringVar(&o.out, "out", "", "write the load-over-time plot of the provider alone to this PNG file")
	flag.StringVar(&o.fallbackOut, "fallback-out", "", "write the plot of oncegate with a fallback provider to this PNG file")
	flag.Parse()
	if err := run(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

// results are the three runs: the naive stack, oncegate with the
// provider alone, oncegate with a fallback provider.
type results struct {
	naive, alone, fallback *sim.Result
}

func run(w io.Writer, o options) error {
	start := o.arrivals / 5
	capacity := int(o.headroom * float64(o.users) / o.arrivals.Seconds())
	prov := sim.Provider{Capacity: capacity, OutageStart: start, OutageEnd: start + o.outage, BrownoutEnd: start + o.outage + o.brownout,
		BrownoutFailure: 0.3, Latency: 800 * time.Millisecond, FailLatency: 50 * time.Millisecond}
	backup := sim.Provider{Capacity: capacity, Latency: prov.Latency, FailLatency: prov.FailLatency}
	fmt.Fprintf(w, "fleet simulation: %d replicas, %d users over %v, provider capacity %d calls/s, outage %v–%v, brown-out (30 %% failures) to %v, seed %d\n",
		o.replicas, o.users, o.arrivals, prov.Capacity, prov.OutageStart, prov.OutageEnd, prov.BrownoutEnd, o.seed)
	fmt.Fprintf(w, "with a fallback: a second provider, always healthy, with the same capacity; the primary route takes at most %d of the 3 attempts\n\n", o.primaryAttempts)
	alone, err := policy.Parse("fleet.yaml", []byte(sim.Fleet))
	if err != nil {
		return err
	}
	withFallback, err := policy.Parse("fleet-fallback.yaml", []byte(sim.FleetWithFallback(o.primaryAttempts)))
	if err != nil {
		return err
	}
	base := sim.Config{Replicas: o.replicas, Users: o.users, Arrivals: o.arrivals, Horizon: o.arrivals + 30*time.Second,
		Provider: prov, Patience: 60 * time.Second, PriceUSD: 0.002, Seed: o.seed}
	var rs results
	for _, c := range []struct {
		name   string
		stack  sim.Stack
		pol    *policy.Policy
		backup *sim.Provider
		res    **sim.Result
	}{{"naive", sim.Naive, alone, nil, &rs.naive}, {"oncegate", sim.Oncegate, alone, nil, &rs.alone}, {"oncegate + fallback", sim.Oncegate, withFallback, &backup, &rs.fallback}} {
		cfg := base
		cfg.Stack, cfg.Policy, cfg.Fallback = c.stack, c.pol, c.backup
		t0 := time.Now()
		if *c.res, err = sim.Run(cfg); err != nil {
			return err
		}
		fmt.Fprintf(w, "%-20s simulated in %v\n", c.name, time.Since(t0).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	if err := rs.print(w); err != nil {
		return err
	}
	if err := writePlot(o.out, rs.plotAlone(o, prov)); err != nil {
		return err
	}
	return writePlot(o.fallbackOut, rs.plotFallback(o, prov))
}

// print writes the two tables: the whole run, and the outage and the
// brown-out as the actions that began in each saw them.
func (rs results) print(w io.Writer) error {
	rows := []struct {
		name string
		r    *sim.Result
	}{{"naive", rs.naive}, {"oncegate", rs.alone}, {"oncegate + fallback", rs.fallback}}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stack\tupstream calls\tcalls/action, outage\tcalls/action, after\trecovery after the return\tanswered\tfailed\tdeadline misses\tspend\t")
	for _, x := range rows {
		r := x.r
		rec := "never"
		if r.Recovery >= 0 {
			rec = r.Recovery.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%d\t%d\t%d\t$%.0f\t\n", x.name, r.Calls, r.CallsPerActionOutage, r.CallsPerActionAfter,
			rec, r.Succeeded, r.Failed, r.Missed, r.SpendUSD)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stack\tanswered, outage\tanswered, brown-out\tprimary calls/action, brown-out\tper action reaching it\tfallback calls\t")
	for _, x := range rows {
		b := x.r.Brownout
		fallbackCalls := 0
		for _, s := range x.r.Seconds {
			fallbackCalls += s.FallbackCalls
		}
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.2f%%\t%.3f\t%.3f\t%d\t\n", x.name, 100*x.r.Outage.SuccessRate(), 100*b.SuccessRate(),
			float64(b.PrimaryCalls)/float64(max(1, b.Actions)), b.PrimaryAmplification(), fallbackCalls)
	}
	return tw.Flush()
}

// plot is one PNG to draw.
type plot struct {
	title  string
	prov   sim.Provider
	series []sim.Series
}

var (
	red    = color.RGBA{214, 39, 40, 255}
	blue   = color.RGBA{31, 119, 180, 255}
	green  = color.RGBA{44, 160, 44, 255}
	grey   = color.RGBA{120, 120, 120, 255}
	orange = color.RGBA{255, 127, 14, 255}
	purple = color.RGBA{148, 103, 189, 255}
	brown  = color.RGBA{140, 86, 75, 255}
)

func series(r *sim.Result, label string, c color.RGBA, f func(sim.Second) int) sim.Series {
	s := sim.Series{Label: label, Color: c}
	for _, x := range r.Seconds {
		s.Values = append(s.Values, float64(f(x)))
	}
	return s
}

func capacityLine(r *sim.Result, prov sim.Provider) sim.Series {
	s := sim.Series{Label: fmt.Sprintf("provider capacity (%d/s)", prov.Capacity), Color: grey}
	for range r.Seconds {
		s.Values = append(s.Values, float64(prov.Capacity))
	}
	return s
}

// plotAlone is upstream calls over time with the provider alone.
func (rs results) plotAlone(o options, prov sim.Provider) plot {
	calls := func(x sim.Second) int { return x.Calls }
	return plot{fmt.Sprintf("upstream calls per second: %d replicas, %d users, provider out from %v to %v", o.replicas, o.users, prov.OutageStart, prov.OutageEnd),
		prov, []sim.Series{
			series(rs.naive, "naive stack: upstream calls/s", red, calls),
			series(rs.alone, "oncegate: upstream calls/s", blue, calls),
			series(rs.alone, "user actions begun/s", green, func(x sim.Second) int { return x.Actions }),
			capacityLine(rs.naive, prov),
		}}
}

// plotFallback is the primary's and the fallback's calls with a fallback
// provider, and the actions that failed with it and without it.
func (rs results) plotFallback(o options, prov sim.Provider) plot {
	failed := func(x sim.Second) int { return x.Failed }
	withFallback := series(rs.fallback, "with the fallback: failed actions/s", brown, failed)
	alone := series(rs.alone, "the primary alone: failed actions/s", purple, failed)
	alone.Width = 7 // under the fallback's calls: in the outage they are the same actions
	if rs.fallback.Failed == 0 {
		withFallback.Label += " (none)"
	}
	return plot{fmt.Sprintf("oncegate with a fallback provider: %d replicas, %d users, primary out from %v to %v", o.replicas, o.users, prov.OutageStart, prov.OutageEnd),
		prov, []sim.Series{
			alone,
			series(rs.fallback, "with the fallback: fallback calls/s", orange, func(x sim.Second) int { return x.FallbackCalls }),
			series(rs.fallback, "with the fallback: primary calls/s", blue, func(x sim.Second) int { return x.Calls - x.FallbackCalls }),
			withFallback,
			capacityLine(rs.fallback, prov),
		}}
}

// writePlot draws p into the PNG file path; "" draws nothing.
func writePlot(path string, p plot) error {
	if path == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := sim.Plot(&buf, p.title, p.prov, p.series); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
