//go:build unix

package sqlite

import (
	"syscall"
	"time"
)

// contextSwitches is the process's voluntary and involuntary context
// switches so far.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nvcsw) + int64(ru.Nivcsw)
}

// processCPUTime is the process's user and system CPU so far.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
