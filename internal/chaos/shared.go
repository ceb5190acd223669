package chaos

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	goredis "github.com/redis/go-redis/v9"
)

// schema is a PostgreSQL schema of the soak's own; drop removes it.
type schema struct {
	url  string // the store URL, with the schema as its search_path
	drop func()
}

func newSchema(ctx context.Context, base string) (*schema, error) {
	u, drop, err := pgtest.Scratch(ctx, base, "chaos_")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &schema{url: u, drop: drop}, nil
}

// redisServer is a redis-server of the soak's own, which the driver
// restarts (empty: it keeps nothing) to take the fleet's coordination
// away and give it back.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func newRedis(ctx context.Context, dir string) (*redisServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("the three-replica soak restarts a Redis of its own: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &redisServer{port: ln.Addr().(*net.TCPAddr).Port, dir: dir}
	_ = ln.Close()
	return r, r.start(ctx)
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// start starts the server and waits until it answers (at most 10 s).
func (r *redisServer) start(ctx context.Context) error {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", "")
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port)})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil {
		// A process coming up: no event to wait on, so it is polled.
		if !pause(ctx, 20*time.Millisecond) {
			return fmt.Errorf("redis-server did not answer within 10s: %w", ctx.Err())
		}
	}
	return nil
}

// stop kills the server: nothing is saved.
func (r *redisServer) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}
