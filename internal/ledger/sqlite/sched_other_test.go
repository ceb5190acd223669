//go:build !unix

package sqlite

import "time"

// contextSwitches is 0 where the platform does not tell them.
func contextSwitches() int64 { return 0 }

// processCPUTime is 0 where the platform does not tell it.
func processCPUTime() time.Duration { return 0 }
