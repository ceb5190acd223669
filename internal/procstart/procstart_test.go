package procstart

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestListening(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to play a server")
	}
	// A server that says where it listens, then keeps writing: the
	// address comes back and the rest of its output never blocks it.
	cmd := exec.Command(sh, "-c", `echo starting; echo "proxy listening on http://127.0.0.1:1234 (pid $$)"; yes | head -c 1000000; exit 0`)
	addr, err := Listening(cmd, time.Minute)
	if err != nil || addr != "http://127.0.0.1:1234" {
		t.Fatalf("addr %q, %v", addr, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the server did not finish its output: %v", err)
	}
	// One that exits without listening says so.
	if _, err := Listening(exec.Command(sh, "-c", "echo nothing here"), time.Minute); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("a server that never listened: %v", err)
	}
}
