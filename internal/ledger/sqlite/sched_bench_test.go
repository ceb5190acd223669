package sqlite

import (
	"runtime/metrics"
	"testing"
)

// schedCounts are the scheduler's counters a benchmark reports per
// request beside its CPU: goroutines started, goroutines made to run
// again after they blocked (wake-ups: the runtime samples one such
// transition in eight into /sched/latencies, so its count times eight
// estimates them) and the operating system's context switches of the
// process (where the platform tells them).
type schedCounts struct {
	created, scheduled, switches float64
}

func readSched() schedCounts {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var c schedCounts
	if s[0].Value.Kind() == metrics.KindUint64 {
		c.created = float64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		for _, n := range s[1].Value.Float64Histogram().Counts {
			c.scheduled += 8 * float64(n) // one in gTrackingPeriod (8) sampled
		}
	}
	c.switches = float64(contextSwitches())
	return c
}

// withSched runs bench and reports what it cost the scheduler per
// b.N requests.
func withSched(b *testing.B, bench func()) {
	c0 := readSched()
	bench()
	c1 := readSched()
	n := float64(b.N)
	b.ReportMetric((c1.created-c0.created)/n, "goroutines/req")
	b.ReportMetric((c1.scheduled-c0.scheduled)/n, "wakeups/req")
	if c1.switches > 0 {
		b.ReportMetric((c1.switches-c0.switches)/n, "ctxsw/req")
	}
}
