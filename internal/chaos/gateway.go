package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/procstart"
)

// gateway is the oncegate process under test: started, killed and
// started again on the same configuration and store. Each start listens
// on a fresh port; clients ask url() for the current one.
type gateway struct {
	bin, config string
	env         []string
	log         io.Writer
	mu          sync.Mutex
	cmd         *exec.Cmd
	addr        string
}

// url is where the gateway listens now ("" while it is down).
func (g *gateway) url() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// start runs `oncegate serve` and returns once it answers /readyz.
func (g *gateway) start(ctx context.Context) error {
	cmd := exec.Command(g.bin, "serve", "--config", g.config)
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Stderr = g.log
	addr, err := procstart.Listening(cmd, time.Minute)
	if err != nil {
		return fmt.Errorf("start the gateway (its log is in the run's directory): %w", err)
	}
	for {
		res, err := http.Get(addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		// A process coming up: no event to wait on, so it is polled.
		if !pause(ctx, 20*time.Millisecond) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return ctx.Err()
		}
	}
	g.mu.Lock()
	g.cmd, g.addr = cmd, addr
	g.mu.Unlock()
	return nil
}

// kill ends the gateway with SIGKILL: no drain, no flush.
func (g *gateway) kill() {
	g.end(syscall.SIGKILL)
}

// stop ends the gateway gracefully.
func (g *gateway) stop() {
	g.end(syscall.SIGTERM)
}

func (g *gateway) end(sig syscall.Signal) {
	g.mu.Lock()
	cmd := g.cmd
	g.cmd, g.addr = nil, ""
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Wait()
}

// pause waits d, or less if ctx ends first; it reports whether ctx is
// still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
