// Package procstart starts a server process and learns where it listens
// from the line it prints ("… listening on http://ADDR"), as
// `oncegate serve` and the benchmark's bare proxy do. The load benchmark
// and the chaos soak start their servers with it.
package procstart

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// Listening starts cmd and returns the address from the first line of
// its standard output that says "listening on ADDR"; the rest of its
// output is read and dropped, so the process never blocks on it. If cmd
// exits first, or prints no such line within the given time, it is
// killed and waited for, and the error says which.
func Listening(cmd *exec.Cmd, within time.Duration) (string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, addr, ok := strings.Cut(sc.Text(), "listening on "); ok && len(strings.Fields(addr)) > 0 {
				found <- strings.Fields(addr)[0]
				break
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, out)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case addr, ok := <-found:
		if ok {
			return addr, nil
		}
		_ = cmd.Wait()
		return "", fmt.Errorf("it exited before it listened")
	case <-t.C:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("it did not listen within %v", within)
	}
}
