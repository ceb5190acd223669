//go:build unix

package sqlite

import "syscall"

// contextSwitches is the process's voluntary and involuntary context
// switches so far.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nvcsw) + int64(ru.Nivcsw)
}
