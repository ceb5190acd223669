package policy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/oncegate/oncegate/internal/retry"
)

// WriteTable prints, per alias, its route table in priority order and its
// policy digest, as `oncegate check` shows it.
func WriteTable(w io.Writer, p *Policy) error {
	for _, a := range p.Aliases {
		e := a.Engine
		hedge := "off"
		if e.HedgeAfter > 0 {
			hedge = "after " + e.HedgeAfter.String()
		}
		after := string(e.AfterOutput)
		if e.AfterOutput == retry.AfterOutputResume {
			after += " (" + string(e.ResumeRoutes) + " route)"
		}
		name := a.Name
		if a.Stateful {
			name += " [stateful: conversations kept by the provider, /v1/responses only]"
		}
		fmt.Fprintf(w, "model %s  (max_attempts %d, backoff %v..%v, jitter %s, deadline %v, max_cost %s, after_output %s, hedge %s, boundary ≤ %s)\n",
			name, e.MaxAttempts, e.BaseDelay, e.MaxDelay, e.Jitter, e.Deadline, costText(e.MaxCost.USD()), after, hedge, a.MaxBoundary)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PRIORITY\tROUTE\tPROVIDER\tMODEL\tRELEASE\tBOUNDARY\tINPUT\tCONTINUATION\tMAX ATTEMPTS\tPRICE IN/OUT $/MTok")
		for i, r := range a.Routes {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s/%s\n", i+1, r.ID, r.Provider.ID, r.Model, r.Release,
				r.Boundary, strings.Join(r.Caps.Input, ","), r.Caps.Continuation, r.MaxAttempts,
				num(r.PriceUSDPerMTok[0]), num(r.PriceUSDPerMTok[1]))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
		fmt.Fprintf(w, "  policy sha256 %s\n\n", a.Digest)
	}
	for _, t := range p.Tenants {
		rate := "unlimited"
		if t.RequestsPerMinute > 0 {
			rate = strconv.Itoa(t.RequestsPerMinute) + "/min"
		}
		fmt.Fprintf(w, "tenant %s  (requests %s, cost %s per day, boundary ≤ %s)\n", t.ID, rate, costText(t.CostPerDay.USD()), t.MaxBoundary)
	}
	b, rb := p.Breaker, p.RetryBudget
	fmt.Fprintf(w, "breakers open at %v%% failures of ≥ %d attempts in %v, for %v, then admit %d probes; retry budget %v × first attempts + %v/s over %v\n\n",
		num(b.FailureRatio*100), b.MinRequests, b.Window, b.OpenFor, b.HalfOpenProbes, num(rb.Ratio), num(rb.MinPerSecond), rb.Window)
	_, err := fmt.Fprintf(w, "policy sha256 %s  (%d tenants, %d providers, %d routes, %d models)\n",
		p.Digest, len(p.Tenants), len(p.Providers), len(p.Routes), len(p.Aliases))
	return err
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func costText(usd float64) string {
	if usd == 0 {
		return "unlimited"
	}
	return "$" + num(usd)
}
