package gateway

import (
	"runtime/debug"
	"strconv"
)

// DefaultGCPercent is the garbage collector's target `oncegate serve` runs
// with when GOGC is not set. A gateway keeps little alive — the requests
// in flight and their buffers — and allocates quickly, so at Go's default
// of 100 the collector starts a cycle every few milliseconds under load:
// in the load benchmark it costs about a sixth of all CPU. At 400 the heap
// may grow to five times what is live before a cycle, and the durable
// path serves 10–15 % more requests a second (README, Performance).
// GOGC overrides it; GOMEMLIMIT bounds the heap for memory-tight hosts.
const DefaultGCPercent = 400

// TuneGC sets the collector's target to DefaultGCPercent unless the
// environment sets GOGC (which the runtime has applied already), and
// returns the target in force (-1: collection off).
func TuneGC(lookupEnv func(string) (string, bool)) int {
	if v, ok := lookupEnv("GOGC"); ok {
		if v == "off" {
			return -1
		}
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		return 100 // the runtime ignores a GOGC it cannot parse
	}
	debug.SetGCPercent(DefaultGCPercent)
	return DefaultGCPercent
}
