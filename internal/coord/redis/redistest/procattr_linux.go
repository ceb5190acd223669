package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithTests has the kernel kill a server when the test binary that
// started it dies (a timeout's panic, a kill), so none outlives it.
func dieWithTests(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
