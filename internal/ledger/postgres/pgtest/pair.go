package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bin is where the PostgreSQL server programs are (Debian's layout).
var Bin = "/usr/lib/postgresql/15/bin"

// Pair is two PostgreSQL servers of a test's own: a primary and a
// streaming standby (pg_basebackup -R) that every commit waits for
// (synchronous_standby_names = '*'), so that a commit the primary
// acknowledged is on the standby too. SwitchOver stops the primary and
// promotes the standby: what a failover manager does.
type Pair struct {
	tb               testing.TB
	dir              string
	primary, standby *server
}

type server struct {
	data string
	port int
}

// NewPair starts a primary and its standby, stopped when the test ends.
// It skips the test without ONCEGATE_TEST_POSTGRES (CI sets it) or
// without the server programs, saying why. As root, the servers run as
// the postgres user (PostgreSQL refuses root).
func NewPair(tb testing.TB) *Pair {
	tb.Helper()
	if os.Getenv(Env) == "" {
		tb.Skipf("%s is not set: no PostgreSQL to test against; a primary and standby of the test's own start then", Env)
	}
	for _, prog := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(Bin, prog)); err != nil {
			tb.Skipf("%s is not installed (%v): no PostgreSQL servers of the test's own", prog, err)
		}
	}
	dir, err := os.MkdirTemp("", "oncegate-pg-pair")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Pair{tb: tb, dir: dir}
	tb.Cleanup(p.stop)
	if err := p.own(dir); err != nil {
		tb.Skipf("run PostgreSQL as the postgres user: %v", err)
	}
	p.primary, p.standby = &server{data: filepath.Join(dir, "primary")}, &server{data: filepath.Join(dir, "standby")}
	for _, s := range []*server{p.primary, p.standby} {
		if s.port, err = freePort(); err != nil {
			tb.Fatal(err)
		}
	}
	p.run("initdb", "-D", p.primary.data, "-A", "trust", "-U", "postgres", "--no-sync")
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\n", dir)
	p.appendConf(p.primary, conf)
	p.start(p.primary)
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.port), "-U", "postgres", "-D", p.standby.data, "-R", "-X", "stream", "-c", "fast")
	p.start(p.standby)
	p.appendConf(p.primary, "synchronous_standby_names = '*'\n")
	p.run("pg_ctl", "-D", p.primary.data, "reload")
	p.wait("the standby streaming, synchronously", p.primary, func(ctx context.Context, c *pgx.Conn) bool {
		var state string
		err := c.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication`).Scan(&state)
		return err == nil && state == "sync"
	})
	return p
}

// URL lists both servers, the primary first, asking for the one that
// takes writes (target_session_attrs=read-write).
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		p.primary.port, p.standby.port)
}

// StopPrimary stops the primary (a fast shutdown: its connections are
// cut). The standby stays read-only until Promote.
func (p *Pair) StopPrimary() { p.run("pg_ctl", "-D", p.primary.data, "-m", "fast", "-w", "stop") }

// Promote makes the standby the primary and waits until it takes writes.
func (p *Pair) Promote() {
	p.run("pg_ctl", "-D", p.standby.data, "-w", "promote")
	p.wait("the promoted standby taking writes", p.standby, func(ctx context.Context, c *pgx.Conn) bool {
		var recovering bool
		return c.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering) == nil && !recovering
	})
}

func (p *Pair) stop() {
	for _, s := range []*server{p.primary, p.standby} {
		if s != nil {
			_ = p.command("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop").Run()
		}
	}
	_ = os.RemoveAll(p.dir)
}

// own hands dir to the postgres user when this is root.
func (p *Pair) own(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// command runs a server program, as the postgres user when this is root.
func (p *Pair) command(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(Bin, prog)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (p *Pair) run(prog string, args ...string) {
	p.tb.Helper()
	if out, err := p.command(prog, args...).CombinedOutput(); err != nil {
		p.tb.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

func (p *Pair) start(s *server) {
	p.tb.Helper()
	p.run("pg_ctl", "-D", s.data, "-l", s.data+".log", "-o", "-p "+strconv.Itoa(s.port), "-w", "start")
}

func (p *Pair) appendConf(s *server, text string) {
	p.tb.Helper()
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		p.tb.Fatal(err)
	}
}

// wait polls cond on a connection to s until it holds (30 s at most).
func (p *Pair) wait(what string, s *server, cond func(context.Context, *pgx.Conn) bool) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", s.port)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := pgx.Connect(ctx, url); err == nil {
			ok := cond(ctx, c)
			_ = c.Close(ctx)
			if ok {
				return
			}
		}
		select {
		case <-ctx.Done():
			p.tb.Fatalf("%s: not within 30s (logs in %s)", what, p.dir)
		case <-tick.C:
		}
	}
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
