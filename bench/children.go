package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oncegate/oncegate/internal/procstart"
)

// The gateway and the bare reverse proxy each run in a process of their
// own, as they would in production, so that neither shares a heap or a
// collector with the load generator and the mock (which share this one),
// and so that the RSS and file descriptors of each can be read from
// /proc.

// proxyEnv, when set in this program's environment, makes it the bare
// reverse proxy in front of the URL it holds instead of the benchmark.
const proxyEnv = "ONCEGATE_BENCH_PROXY"

// serveBareProxy is the yardstick: net/http/httputil's ReverseProxy with
// a transport that keeps as many idle connections as the load needs
// (the default of two per host would make it pay for new connections
// and flatter everything measured against it). It prints where it
// listens and serves until killed.
func serveBareProxy(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("proxy listening on http://%s\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/", rp)
	// The runtime figures the benchmark reads from a gateway's /metrics,
	// under the Go collector's names, so that it reads both the same way.
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		s := make([]metrics.Sample, len(runtimeFigures))
		for i, f := range runtimeFigures {
			s[i].Name = f.metric
		}
		metrics.Read(s)
		for i, f := range runtimeFigures {
			fmt.Fprintf(w, "%s %d\n", f.name, s[i].Value.Uint64())
		}
	})
	return http.Serve(ln, mux)
}

// runtimeFigures are the runtime/metrics the benchmark reads from each
// server, by the names the Go collector of client_golang exports them
// under (a gateway's /metrics has them; docs/performance.md).
var runtimeFigures = []struct{ metric, name string }{
	{"/sched/goroutines-created:goroutines", goroutinesCreated},
	{"/memory/classes/heap/objects:bytes", heapObjects},
	{"/memory/classes/heap/stacks:bytes", stackBytes},
}

// The Go collector's names of runtimeFigures.
const (
	goroutinesCreated = "go_sched_goroutines_created_goroutines_total"
	heapObjects       = "go_memory_classes_heap_objects_bytes"
	stackBytes        = "go_memory_classes_heap_stacks_bytes"
)

// goroutines is how many goroutines the child has started so far; -1 if
// it cannot tell.
func (c *child) goroutines() int64 { return c.figures()[goroutinesCreated] }

// held is the memory the child's heap objects and goroutine stacks
// occupy now — live objects and garbage not yet collected, without the
// collector's headroom or what the runtime keeps for reuse; -1 if it
// cannot tell.
func (c *child) held() int64 {
	f := c.figures()
	if f[heapObjects] < 0 || f[stackBytes] < 0 {
		return -1
	}
	return f[heapObjects] + f[stackBytes]
}

// figures reads runtimeFigures from the child's /metrics (-1 for each it
// cannot read).
func (c *child) figures() map[string]int64 {
	out := map[string]int64{}
	for _, f := range runtimeFigures {
		out[f.name] = -1
	}
	req, err := http.NewRequest("GET", c.url+"/metrics", nil)
	if err != nil {
		return out
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminKey) // the bare proxy ignores it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if _, want := out[name]; !ok || !want {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = int64(f)
		}
	}
	return out
}

// switches is how many times the child's threads have been switched
// out so far, voluntarily (to wait) or not (from /proc: every thread's
// voluntary_ctxt_switches and nonvoluntary_ctxt_switches).
func (c *child) switches() int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", c.cmd.Process.Pid, t.Name()))
		if err != nil {
			continue // a thread that ended
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// child is a server process the benchmark started.
type child struct {
	name string
	url  string
	cmd  *exec.Cmd
}

// startChild starts cmd and waits until it prints the address it
// listens on ("listening on http://ADDR").
func startChild(name string, cmd *exec.Cmd) (*child, error) {
	u, err := procstart.Listening(cmd, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%s did not start (its log is beside the benchmark's files): %w", name, err)
	}
	return &child{name: name, url: u, cmd: cmd}, nil
}

// stop ends the child: SIGTERM, so that a gateway writes its profiles,
// then SIGKILL if it has not stopped within a minute.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// rss is the child's resident set and its peak so far, in bytes.
func (c *child) rss() (now, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			now = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return now, peak
}

// cpu is the CPU time the child has used so far, in user and in kernel
// mode (from /proc: a resolution of the kernel's clock tick, 10 ms).
func (c *child) cpu() (user, sys time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	// The fields after the command name, which is in parentheses.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0, 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	const tick = 10 * time.Millisecond       // USER_HZ is 100 on Linux
	return time.Duration(ut) * tick, time.Duration(st) * tick
}

// fds is how many file descriptors the child holds open.
func (c *child) fds() int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.cmd.Process.Pid))
	return len(es)
}

// resetPeak makes the child's peak RSS start again from its current RSS
// (Linux: writing 5 to clear_refs), so that a run's peak is its own.
func (c *child) resetPeak() {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", c.cmd.Process.Pid), []byte("5"), 0)
}

// startProxy starts the bare reverse proxy in front of target.
func startProxy(target, logDir string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), proxyEnv+"="+target)
	if cmd.Stderr, err = os.Create(filepath.Join(logDir, "proxy.log")); err != nil {
		return nil, err
	}
	return startChild("bare proxy", cmd)
}

// buildGateway builds the oncegate binary into dir: the benchmark runs
// what users run.
func buildGateway(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "oncegate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/oncegate/oncegate/cmd/oncegate")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/oncegate: %w", err)
	}
	return bin, nil
}

// startServe runs `oncegate serve` with config (benchConfig and extra)
// in front of mockURL, its access log written to a file in dir; with
// profiles set, it writes its CPU profile there as <name>.cpu, and with
// traces its execution trace as <name>.trace.
func startServe(bin, dir, profiles, traces, name, mockURL, extra string) (*child, error) {
	slug := strings.NewReplacer(" ", "-", ":", "").Replace(name)
	cfg := filepath.Join(dir, slug+".yaml")
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(benchConfig, "MOCK", mockURL)+extra), 0o600); err != nil {
		return nil, err
	}
	args := []string{"serve", "--config", cfg}
	if profiles != "" {
		args = append(args, "--cpuprofile", filepath.Join(profiles, slug+".cpu"))
	}
	if traces != "" {
		args = append(args, "--trace", filepath.Join(traces, slug+".trace"))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BENCH_KEY="+benchKey, "BENCH_ADMIN_KEY="+benchAdminKey)
	var err error
	if cmd.Stderr, err = os.Create(filepath.Join(dir, slug+".log")); err != nil {
		return nil, err
	}
	return startChild(name, cmd)
}
