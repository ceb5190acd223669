package memtune

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentKeepsTheHeapWithinHeadroomOfWhatIsLive(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, MaxGCPercent},
		{1 << 20, MaxGCPercent},
		{Headroom / 4, MaxGCPercent},
		{Headroom / 2, 200},
		{Headroom, 100},
		{2 * Headroom, 50},
		{4 * Headroom, MinGCPercent},
		{40 * Headroom, MinGCPercent},
	} {
		if got := GCPercent(tc.live); got != tc.want {
			t.Errorf("GCPercent(%d MiB) = %d; want %d", tc.live>>20, got, tc.want)
		}
	}
}

func TestCgroupLimitReadsV2ThenV1AndKnowsNoLimit(t *testing.T) {
	write := func(dir, name, v string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v2 := t.TempDir()
	write(v2, "memory.max", "536870912\n")
	if n, ok := CgroupLimit(v2); !ok || n != 512<<20 {
		t.Errorf("v2 limit = %d, %v", n, ok)
	}
	unlimited := t.TempDir()
	write(unlimited, "memory.max", "max\n")
	if _, ok := CgroupLimit(unlimited); ok {
		t.Error(`"max" read as a limit`)
	}
	v1 := t.TempDir()
	write(v1, "memory/memory.limit_in_bytes", "1073741824\n")
	if n, ok := CgroupLimit(v1); !ok || n != 1<<30 {
		t.Errorf("v1 limit = %d, %v", n, ok)
	}
	v1none := t.TempDir()
	write(v1none, "memory/memory.limit_in_bytes", "9223372036854771712\n")
	if _, ok := CgroupLimit(v1none); ok {
		t.Error("v1's no-limit value read as a limit")
	}
	if _, ok := CgroupLimit(t.TempDir()); ok {
		t.Error("a limit where there is no cgroup file")
	}
}

// restore puts the runtime's collector settings back after a test.
func restore(t *testing.T) {
	pct, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(pct)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(limit) })
}

func env(kv ...string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

func TestStartLeavesWhatTheEnvironmentSets(t *testing.T) {
	restore(t)
	cg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cg, "memory.max"), []byte("1000000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	debug.SetMemoryLimit(3 << 30) // as the runtime would from GOMEMLIMIT=3GiB
	s := Start(env("GOGC", "150", "GOMEMLIMIT", "3GiB"), 1<<30, 0, cg)
	if s.GCPercent != 150 || s.Adaptive || s.LimitFrom != "GOMEMLIMIT" || s.Limit != 3<<30 {
		t.Errorf("with GOGC and GOMEMLIMIT set: %+v", s)
	}
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Errorf("the limit from GOMEMLIMIT was changed to %d", got)
	}
	if s := Start(env("GOGC", "off"), 0, 0, cg); s.GCPercent != -1 || s.LimitFrom != "cgroup" || s.Limit != 900000000 {
		t.Errorf("with GOGC=off and a cgroup: %+v", s)
	}
	if s := Start(env(), 512<<20, 0, cg); !s.Adaptive || s.GCPercent != MaxGCPercent || s.LimitFrom != "limits.memory_bytes" || s.Limit != 512<<20 {
		t.Errorf("with a configured limit: %+v", s)
	}
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Errorf("memory limit in force %d; want the configured 512 MiB", got)
	}
	if s := Start(env(), 0, 0, t.TempDir()); s.LimitFrom != "" || s.Limit != math.MaxInt64 {
		t.Errorf("with nothing to go by: %+v", s)
	}
}

var ballast [][]byte

// target is the collector's percentage in force.
func target() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }

// settle collects until the tuner, which re-tunes on the runtime's cleanup
// goroutine after a collection, has put a target want accepts in force,
// and returns the target then. It waits on that event, not on a number of
// collections: on a loaded machine the cleanup goroutine may not run for a
// while, however many collections pass. A minute without it is a failure.
func settle(want func(int) bool) int {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		runtime.GC()
		if p := target(); want(p) {
			return p
		}
		time.Sleep(time.Millisecond) // let the cleanup goroutine run
	}
	return target()
}

func TestTheTargetFallsAsTheLiveHeapGrowsAndRisesAgain(t *testing.T) {
	restore(t)
	Start(env(), 0, 0, t.TempDir())
	t.Cleanup(func() { ballast = nil }) // a failure must not leave 512 MiB to the next test
	for range 64 {
		ballast = append(ballast, make([]byte, 8<<20)) // 512 MiB live: 4 × Headroom
	}
	if p := settle(func(p int) bool { return p == MinGCPercent }); p != MinGCPercent {
		t.Fatalf("with 512 MiB live the target is %d; want %d", p, MinGCPercent)
	}
	ballast = nil
	if p := settle(func(p int) bool { return p == MaxGCPercent }); p != MaxGCPercent {
		t.Fatalf("with the heap freed the target is %d; want %d", p, MaxGCPercent)
	}
}

// A configured headroom replaces the default: 32 MiB alive with 32 MiB
// of headroom is a target of about 100, where the default would be 400.
func TestAConfiguredHeadroomSetsTheTarget(t *testing.T) {
	restore(t)
	s := Start(env(), 0, 32<<20, t.TempDir())
	if !s.Adaptive || s.Headroom != 32<<20 {
		t.Fatalf("settings %+v", s)
	}
	t.Cleanup(func() { Start(env(), 0, 0, t.TempDir()) })
	for range 4 {
		ballast = append(ballast, make([]byte, 8<<20))
	}
	t.Cleanup(func() { ballast = nil })
	if p := settle(func(p int) bool { return p >= 60 && p <= 100 }); p < 60 || p > 100 {
		t.Fatalf("with 32 MiB alive and 32 MiB of headroom the target is %d; want about 100", p)
	}
}

func TestHoldLowersTheTargetBeforeTheBytesExist(t *testing.T) {
	restore(t)
	Start(env(), 0, 0, t.TempDir())
	settle(func(p int) bool { return p == MaxGCPercent }) // the tuner has seen this test's small heap
	release := Hold(4 * Headroom)
	if p := target(); p != MinGCPercent {
		t.Fatalf("after holding 512 MiB the target is %d; want %d at once", p, MinGCPercent)
	}
	release()
	if p := settle(func(p int) bool { return p == MaxGCPercent }); p != MaxGCPercent {
		t.Fatalf("after the release and a collection the target is %d; want %d", p, MaxGCPercent)
	}
}
