package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Deployment is a kind of Redis deployment the coordination runs on:
// URL gives a test a namespace of its own there (a fresh key_prefix,
// whose keys are deleted when the test ends).
type Deployment struct {
	Name string
	URL  func(tb testing.TB) string
}

// Deployments are every kind the coordination supports: the server
// ONCEGATE_TEST_REDIS names, a server Redis Sentinel watches, and a
// three-node Redis Cluster — the last two started by the tests, once per
// test binary (see Main). Run one conformance suite against each.
func Deployments() []Deployment {
	return []Deployment{{"single", URL}, {"sentinel", SentinelURL}, {"cluster", ClusterURL}}
}

// Main runs a package's tests and stops the deployments they started: a
// package that uses SentinelURL or ClusterURL calls it from TestMain,
// os.Exit(redistest.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, stop := range shared.stops {
		stop()
	}
	return code
}

// shared holds the deployments started once per test binary.
var shared struct {
	mu       sync.Mutex
	main     bool
	stops    []func()
	cluster  *Cluster
	sentinel *Sentinel
	err      error // why they could not start
}

// needServers skips a test without ONCEGATE_TEST_REDIS (CI sets it) or
// without the Redis binaries, saying why; and fails it if the package's
// TestMain does not stop what it starts.
func needServers(tb testing.TB) {
	tb.Helper()
	if os.Getenv(Env) == "" {
		tb.Skipf("%s is not set: no Redis to test against (e.g. %s=redis://127.0.0.1:6379/0); Sentinel and Cluster tests start their own servers then", Env, Env)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("%s is not installed: no Redis Sentinel or Cluster of the tests' own", bin)
		}
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		tb.Fatal("this package's TestMain must call redistest.Main, which stops the servers the tests start")
	}
}

// ClusterURL returns a redis+cluster:// URL with a fresh key_prefix on a
// three-node cluster (three masters, no replicas) started for the test
// binary.
func ClusterURL(tb testing.TB) string {
	tb.Helper()
	needServers(tb)
	shared.mu.Lock()
	if shared.cluster == nil && shared.err == nil {
		var c *Cluster
		c, shared.err = startCluster(3)
		if c != nil {
			shared.cluster = c
			shared.stops = append(shared.stops, c.stop)
		}
	}
	c, err := shared.cluster, shared.err
	shared.mu.Unlock()
	if err != nil {
		tb.Fatalf("start a Redis Cluster: %v", err)
	}
	return c.URL(tb)
}

// NewCluster starts a three-node cluster for one test (stopped when it
// ends): Stop and Start take a node down and back.
func NewCluster(tb testing.TB) *Cluster {
	tb.Helper()
	needServers(tb)
	c, err := startCluster(3)
	if c != nil {
		tb.Cleanup(c.stop)
	}
	if err != nil {
		tb.Fatalf("start a Redis Cluster: %v", err)
	}
	return c
}

// Cluster is a Redis Cluster of the tests' own: masters, no replicas.
type Cluster struct {
	dir   string
	nodes []*process
}

// URL is a redis+cluster:// URL of the cluster with a fresh key_prefix.
func (c *Cluster) URL(tb testing.TB) string {
	return namespace(tb, "redis+cluster://"+strings.Join(c.Addrs(), ","))
}

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		out[i] = p.addr
	}
	return out
}

// Stop kills node i (SIGKILL: it keeps no data, only its cluster
// configuration).
func (c *Cluster) Stop(i int) { c.nodes[i].kill() }

// Start starts node i again and waits until every node says the cluster
// is ok.
func (c *Cluster) Start(tb testing.TB, i int) {
	tb.Helper()
	if err := c.nodes[i].start(); err != nil {
		tb.Fatal(err)
	}
	if err := c.waitOK(); err != nil {
		tb.Fatal(err)
	}
}

func (c *Cluster) stop() {
	for _, p := range c.nodes {
		p.kill()
	}
	_ = os.RemoveAll(c.dir)
}

// waitOK waits until every node says cluster_state:ok and knows them all.
func (c *Cluster) waitOK() error {
	for _, p := range c.nodes {
		rdb := goredis.NewClient(&goredis.Options{Addr: p.addr})
		err := until(30*time.Second, func(ctx context.Context) bool {
			v, err := rdb.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(v, "cluster_state:ok") && strings.Contains(v, "cluster_known_nodes:"+strconv.Itoa(len(c.nodes)))
		})
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("node %s: cluster state never ok: %w (logs in %s)", p.addr, err, c.dir)
		}
	}
	return nil
}

// SentinelURL returns a redis+sentinel:// URL with a fresh key_prefix on
// a master and its Sentinel started for the test binary.
func SentinelURL(tb testing.TB) string {
	tb.Helper()
	needServers(tb)
	shared.mu.Lock()
	if shared.sentinel == nil && shared.err == nil {
		var s *Sentinel
		s, shared.err = startSentinel(false)
		if s != nil {
			shared.sentinel = s
			shared.stops = append(shared.stops, s.stop)
		}
	}
	s, err := shared.sentinel, shared.err
	shared.mu.Unlock()
	if err != nil {
		tb.Fatalf("start a Redis Sentinel: %v", err)
	}
	return namespace(tb, s.url())
}

// namespace adds a fresh key_prefix to a coordination URL and deletes its
// keys, on every master, when the test ends.
func namespace(tb testing.TB, base string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "og-test-" + hex.EncodeToString(b) + ":"
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	u := base + sep + "key_prefix=" + prefix
	tb.Cleanup(func() { Flush(tb, u) })
	return u
}

// Flush deletes every key a coordination URL's key_prefix starts, on
// every master: what a Redis restarted empty would have lost.
func Flush(tb testing.TB, coordination string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, prefix, err := splitPrefix(coordination)
	if err != nil {
		tb.Fatal(err)
	}
	del := func(ctx context.Context, rdb *goredis.Client) error {
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch scheme, rest, _ := strings.Cut(u, "://"); scheme {
	case "redis+cluster":
		hosts, _, _ := strings.Cut(rest, "?")
		rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(strings.TrimSuffix(hosts, "/"), ",")})
		defer rdb.Close()
		err = rdb.ForEachMaster(ctx, del)
	case "redis+sentinel":
		hosts, query, _ := strings.Cut(rest, "?")
		hosts, _, _ = strings.Cut(hosts, "/")
		master := strings.TrimPrefix(query, "master_name=")
		master, _, _ = strings.Cut(master, "&")
		rdb := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(hosts, ",")})
		defer rdb.Close()
		err = del(ctx, rdb)
	default:
		opts, perr := goredis.ParseURL(u)
		if perr != nil {
			tb.Fatal(perr)
		}
		rdb := goredis.NewClient(opts)
		defer rdb.Close()
		err = del(ctx, rdb)
	}
	if err != nil {
		tb.Logf("flush %s: %v", prefix, err)
	}
}

// splitPrefix takes key_prefix out of a URL's query (it is the last
// parameter namespace adds, or the only one).
func splitPrefix(u string) (rest, prefix string, err error) {
	i := strings.LastIndex(u, "key_prefix=")
	if i < 0 {
		return u, "", fmt.Errorf("%s has no key_prefix", u)
	}
	prefix, _, _ = strings.Cut(u[i+len("key_prefix="):], "&")
	rest = strings.TrimRight(u[:i], "?&")
	return rest, prefix, nil
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

// process is a redis-server of the tests' own.
type process struct {
	addr string
	args []string
	dir  string
	cmd  *exec.Cmd
}

// startServer starts redis-server with args on a free port, logging to
// dir, and waits until it answers.
func startServer(dir string, args ...string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &process{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	p.args = append(append([]string{}, args...), "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	return p, p.start()
}

// start starts the server (again: empty, on its port) and waits until
// it answers.
func (p *process) start() error {
	p.cmd = exec.Command("redis-server", p.args...)
	dieWithTests(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: p.addr})
	defer rdb.Close()
	if err := until(10*time.Second, func(ctx context.Context) bool { return rdb.Ping(ctx).Err() == nil }); err != nil {
		p.kill()
		return fmt.Errorf("redis-server on %s did not answer: %w (log in %s)", p.addr, err, p.dir)
	}
	return nil
}

func (p *process) kill() {
	if p != nil && p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// until polls cond every 20 ms until it holds, or fails after d.
func until(d time.Duration, cond func(ctx context.Context) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v", d)
		case <-tick.C:
		}
	}
	return nil
}

// startCluster starts n masters and makes them a cluster
// (redis-cli --cluster create), waiting until every node says
// cluster_state:ok.
func startCluster(n int) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "oncegate-redis-cluster")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for i := range n {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o755); err != nil {
			return c, err
		}
		busPort, err := freePort()
		if err != nil {
			return c, err
		}
		p, err := startServer(d, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(d, "nodes.conf"),
			"--cluster-port", strconv.Itoa(busPort), "--cluster-node-timeout", "2000")
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, p)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, c.Addrs()...), "--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	return c, c.waitOK()
}

// Sentinel is a master that Redis Sentinel watches, with (if started
// with one) a replica Sentinel can promote.
type Sentinel struct {
	Name            string
	dir             string
	master, replica *process
	sentinel        *process
}

// NewSentinel starts a master, a replica and a Sentinel watching them,
// for one test (stopped when it ends): Failover promotes the replica.
func NewSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	needServers(tb)
	s, err := startSentinel(true)
	if err != nil {
		tb.Fatalf("start a Redis Sentinel: %v", err)
	}
	tb.Cleanup(s.stop)
	return s
}

// URL is a redis+sentinel:// URL of the deployment with a fresh
// key_prefix.
func (s *Sentinel) URL(tb testing.TB) string { return namespace(tb, s.url()) }

func (s *Sentinel) url() string {
	return "redis+sentinel://" + s.sentinel.addr + "/0?master_name=" + s.Name
}

// MasterAddr is the master's address as the Sentinel says.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.sentinel.addr})
	defer sc.Close()
	v, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(v[0], v[1]), nil
}

// Failover has the Sentinel promote the replica (SENTINEL FAILOVER: a
// switchover, the old master still running), and waits until it is
// over: the Sentinel names the replica master, it says so itself, and
// the old master has become its replica — until then the old master
// still takes writes, which its conversion discards. The Sentinel would
// convert the old master at its next look, up to ten seconds later;
// Failover sends it the same REPLICAOF at once.
func (s *Sentinel) Failover(tb testing.TB) {
	tb.Helper()
	if s.replica == nil {
		tb.Fatal("a Sentinel without a replica cannot fail over")
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.sentinel.addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.Failover(ctx, s.Name).Err(); err != nil {
		tb.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	promoted := goredis.NewClient(&goredis.Options{Addr: s.replica.addr})
	defer promoted.Close()
	demoted := goredis.NewClient(&goredis.Options{Addr: s.master.addr})
	defer demoted.Close()
	host, port, _ := net.SplitHostPort(s.replica.addr)
	err := until(60*time.Second, func(ctx context.Context) bool {
		m, err := sc.Master(ctx, s.Name).Result()
		if err != nil || net.JoinHostPort(m["ip"], m["port"]) != s.replica.addr || strings.Contains(m["flags"], "failover") {
			return false
		}
		if role, err := promoted.Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
			return false
		}
		info, err := demoted.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			demoted.ReplicaOf(ctx, host, port)
		}
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port) &&
			strings.Contains(info, "master_link_status:up")
	})
	if err != nil {
		tb.Fatalf("the failover never completed: %v", err)
	}
	s.master, s.replica = s.replica, s.master
}

func (s *Sentinel) stop() {
	s.sentinel.kill()
	s.replica.kill()
	s.master.kill()
	_ = os.RemoveAll(s.dir)
}

// startSentinel starts a master (and a replica of it, if asked) and a
// Sentinel monitoring the master, waiting until the Sentinel knows it —
// and the replica, which it must know of to promote it.
func startSentinel(withReplica bool) (*Sentinel, error) {
	dir, err := os.MkdirTemp("", "oncegate-redis-sentinel")
	if err != nil {
		return nil, err
	}
	s := &Sentinel{Name: "oncegate-test", dir: dir}
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		_ = os.Mkdir(d, 0o755)
		return d
	}
	// A replica's first sync at once, not after the default 5 s delay.
	quick := []string{"--repl-diskless-sync-delay", "0"}
	if s.master, err = startServer(sub("master"), quick...); err != nil {
		s.stop()
		return nil, err
	}
	if withReplica {
		host, port, _ := net.SplitHostPort(s.master.addr)
		if s.replica, err = startServer(sub("replica"), append(quick, "--replicaof", host, port)...); err != nil {
			s.stop()
			return nil, err
		}
	}
	host, port, _ := net.SplitHostPort(s.master.addr)
	conf := filepath.Join(sub("sentinel"), "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s 10000\n",
		s.Name, host, port, s.Name, s.Name)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		s.stop()
		return nil, err
	}
	if s.sentinel, err = startServer(filepath.Dir(conf), conf, "--sentinel"); err != nil {
		s.stop()
		return nil, err
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.sentinel.addr})
	defer sc.Close()
	err = until(30*time.Second, func(ctx context.Context) bool {
		if _, err := sc.GetMasterAddrByName(ctx, s.Name).Result(); err != nil {
			return false
		}
		if !withReplica {
			return true
		}
		replicas, err := sc.Replicas(ctx, s.Name).Result()
		return err == nil && len(replicas) == 1 && !strings.Contains(replicas[0]["flags"], "down") &&
			replicas[0]["master-link-status"] == "ok"
	})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("the Sentinel never knew the master and its replica: %w (logs in %s)", err, dir)
	}
	return s, nil
}
