// Package memtune sets the Go runtime's collector for a gateway: a high
// GOGC while little is alive, lowered as the live heap grows so that the
// heap never runs more than a fixed headroom past it, and a soft memory
// limit from the configuration or the cgroup. docs/performance.md
// explains the numbers.
//
// A gateway keeps little alive — the requests in flight and their buffers
// — and allocates quickly, so at Go's default GOGC of 100 the collector
// runs every few milliseconds under load and costs about a sixth of the
// CPU; at 400 the durable path serves 10–15 % more requests a second. But
// 400 lets the heap grow to five times what is live: 32 requests with
// 3.7 MB bodies, about 350 MB alive, would grow it to 1.7 GB. So the
// percentage is recomputed after every collection: 400 while the live
// heap is under a quarter of the headroom (limits.gc_headroom_bytes,
// default Headroom), then headroom × 100 / live, never under 25.
package memtune

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxGCPercent is the collector's target while the live heap is small.
const MaxGCPercent = 400

// MinGCPercent is the lowest target the tuner sets: past it, a collection
// would start after every few megabytes of a large heap.
const MinGCPercent = 25

// Headroom is how far past the live heap the tuner lets the heap grow
// once the live heap exceeds a quarter of it, unless configured
// otherwise (limits.gc_headroom_bytes).
const Headroom = 128 << 20

// GCPercent is the collector target for a live heap of live bytes with
// the default headroom.
func GCPercent(live uint64) int { return gcPercent(live, Headroom) }

// gcPercent is the collector target for a live heap of live bytes that
// may grow headroom bytes past it.
func gcPercent(live, headroom uint64) int {
	if live == 0 {
		return MaxGCPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, MinGCPercent), MaxGCPercent))
}

// Settings are what Start put in force.
type Settings struct {
	// GCPercent is the collector's target at start; -1: collection off.
	GCPercent int
	// Adaptive: the target follows the live heap (GOGC was not set).
	Adaptive bool
	// Headroom is how far past what is alive the adaptive target lets
	// the heap grow, in bytes (0 when not adaptive).
	Headroom int64
	// Limit is the soft memory limit in bytes (math.MaxInt64: none), and
	// LimitFrom where it came from: "GOMEMLIMIT", "limits.memory_bytes",
	// "cgroup" or "" for none.
	Limit     int64
	LimitFrom string
}

// Start tunes the collector for this process: unless the environment
// sets GOGC, an adaptive target (see the package comment) that lets the
// heap grow headroom bytes past what is alive (0: Headroom); unless it
// sets GOMEMLIMIT, a soft memory limit of configured bytes when
// positive, else nine tenths of the cgroup's memory limit under
// cgroupRoot (normally /sys/fs/cgroup) when it has one.
func Start(lookupEnv func(string) (string, bool), configured, headroom int64, cgroupRoot string) Settings {
	var s Settings
	if headroom <= 0 {
		headroom = Headroom
	}
	mu.Lock()
	room = uint64(headroom)
	mu.Unlock()
	if v, ok := lookupEnv("GOGC"); ok {
		s.GCPercent = 100 // the runtime ignores a GOGC it cannot parse
		if v == "off" {
			s.GCPercent = -1
		} else if n, err := strconv.Atoi(v); err == nil {
			s.GCPercent = n
		}
	} else {
		s.GCPercent, s.Adaptive, s.Headroom = MaxGCPercent, true, headroom
		mu.Lock()
		current = MaxGCPercent
		mu.Unlock()
		debug.SetGCPercent(MaxGCPercent)
		adapt.Do(func() { adaptive.Store(true); arm() })
	}
	s.Limit = math.MaxInt64
	switch _, env := lookupEnv("GOMEMLIMIT"); {
	case env:
		s.Limit, s.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	case configured > 0:
		s.Limit, s.LimitFrom = configured, "limits.memory_bytes"
	default:
		if c, ok := CgroupLimit(cgroupRoot); ok {
			s.Limit, s.LimitFrom = c/10*9, "cgroup"
		}
	}
	if s.LimitFrom != "GOMEMLIMIT" {
		debug.SetMemoryLimit(s.Limit)
	}
	return s
}

var (
	adapt    sync.Once
	adaptive atomic.Bool
)

// sentinel is garbage the collector finds at every cycle: its cleanup
// re-tunes the target and arms the next one. (A pointer field keeps it
// out of the tiny allocator, whose blocks may outlive their objects.)
type sentinel struct {
	_ *int
	_ [16]byte
}

// arm makes the next collection re-tune the target.
func arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(struct{}) { retune(); arm() }, struct{}{})
}

var (
	liveSample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	mu         sync.Mutex
	current    = MaxGCPercent
	lastLive   uint64 // what the last collection found alive
	held       uint64 // what Hold announced and has not released
	room       uint64 = Headroom
)

// retune sets the target for the live heap the last collection found,
// plus what is held; it runs on the runtime's cleanup goroutine.
func retune() {
	metrics.Read(liveSample)
	if liveSample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	lastLive = liveSample[0].Value.Uint64()
	set(gcPercent(lastLive+held, room))
}

// set puts target p in force (under mu). Setting it stops the world
// briefly, so only a real change is made.
func set(p int) {
	if p != current && (p*10 < current*9 || p*9 > current*10 || p == MaxGCPercent || p == MinGCPercent) {
		debug.SetGCPercent(p)
		current = p
	}
}

// LargeBytes is the size from which a request should announce itself
// with Hold.
const LargeBytes = 1 << 20

// Hold announces that about n bytes are about to become alive — a large
// request body and the copies its handling makes — so that the target
// falls before they are allocated, not one collection later: a burst of
// large requests would otherwise grow the heap at the high target. The
// function returned takes the announcement back (the next collection
// raises the target again). Without the adaptive target it does nothing.
func Hold(n int64) (release func()) {
	if n <= 0 || !adaptive.Load() {
		return func() {}
	}
	mu.Lock()
	held += uint64(n)
	if p := gcPercent(lastLive+held, room); p < current {
		set(p)
	}
	mu.Unlock()
	return func() {
		mu.Lock()
		held -= uint64(n)
		mu.Unlock()
	}
}

// CgroupLimit is the memory limit of the cgroup the process runs in, read
// from cgroup v2's memory.max or v1's memory.limit_in_bytes under root;
// ok is false when there is none.
func CgroupLimit(root string) (int64, bool) {
	for _, f := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "no limit" (a page-rounded MaxInt64)
			return 0, false
		}
		return n, true
	}
	return 0, false
}
