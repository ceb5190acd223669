package sqlite

import (
	"runtime/metrics"
	"testing"
)

// withSched runs bench and reports per request (b.N of them) the
// goroutines it started and the operating system's context switches of
// the process (where the platform tells them): what the hand-offs
// between goroutines cost beside the CPU. (The runtime's count of
// goroutine wake-ups is sampled one in eight, too coarse to report per
// request.)
func withSched(b *testing.B, bench func()) {
	created := func() float64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return float64(s[0].Value.Uint64())
	}
	g0, c0 := created(), contextSwitches()
	bench()
	g1, c1 := created(), contextSwitches()
	n := float64(b.N)
	b.ReportMetric((g1-g0)/n, "goroutines/req")
	if c1 > 0 {
		b.ReportMetric(float64(c1-c0)/n, "ctxsw/req")
	}
}
