//go:build failpoints

package gateway

import "os"

// failpoint blocks forever at a named point when ONCEGATE_FAILPOINT names
// it, after saying so on stderr: crash tests kill the process there. It
// exists only in binaries built with -tags failpoints (the end-to-end
// tests build one); in any other build it does nothing.
func failpoint(name string) {
	if os.Getenv("ONCEGATE_FAILPOINT") != name {
		return
	}
	_, _ = os.Stderr.WriteString("ONCEGATE_FAILPOINT " + name + " reached\n")
	select {}
}
