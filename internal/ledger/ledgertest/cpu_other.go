//go:build !unix

package ledgertest

import "time"

// processCPU is 0 where the process's CPU is not read: the benchmark
// then reports no CPU per request.
func processCPU() time.Duration { return 0 }
