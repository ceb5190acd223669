//go:build !unix

package sqlite

// contextSwitches is 0 where the platform does not tell them.
func contextSwitches() int64 { return 0 }
