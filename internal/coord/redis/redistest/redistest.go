// Package redistest gives tests a Redis namespace of their own on the
// server named by ONCEGATE_TEST_REDIS: a URL whose key_prefix no other
// test uses, whose keys are deleted when the test ends. Without the
// variable a test is skipped with the reason printed; with it, an
// unreachable server fails the test (CI sets it, so CI never skips).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Env names the server tests use.
const Env = "ONCEGATE_TEST_REDIS"

// URL returns a redis:// URL with a fresh key_prefix.
func URL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(Env)
	if base == "" {
		tb.Skipf("%s is not set: no Redis to test against (e.g. %s=redis://127.0.0.1:6379/0)", Env, Env)
	}
	opts, err := goredis.ParseURL(base)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	rdb := goredis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		tb.Fatalf("%s=%s is unreachable: %v", Env, base, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "og-test-" + hex.EncodeToString(b) + ":"
	tb.Cleanup(func() {
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("key_prefix", prefix)
	u.RawQuery = q.Encode()
	return u.String()
}

// Server is a redis-server of a test's own, on a port of its own, that
// the test can stop and start again: a real outage and a real restart
// (empty: it keeps nothing on disk) without touching the shared server.
type Server struct {
	tb   testing.TB
	port int
	cmd  *exec.Cmd
}

// NewServer starts one; it is stopped when the test ends. Without a
// redis-server binary the test is skipped, saying so.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server is not installed: no Redis of the test's own to stop and restart")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{tb: tb, port: ln.Addr().(*net.TCPAddr).Port}
	_ = ln.Close()
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Start starts the server (again) and waits until it answers.
func (s *Server) Start() {
	s.tb.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.tb.TempDir(), "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			s.tb.Fatal("redis-server did not answer within 10s")
		case <-tick.C:
		}
	}
}

// Stop kills the server (SIGKILL: nothing is saved).
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
