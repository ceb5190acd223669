// Package redis is the coordination that several gateway replicas share
// (docs/replicas.md), in Redis: in-flight claims with leases, so that N
// identical requests spread over the replicas make one upstream
// generation; joins across replicas, the owner copying a flight's output
// into a Redis stream that joiners on other replicas read from its first
// byte; and the breakers, the fleet retry budget and the tenants' rates
// and daily spend, shared.
//
// The common path is cheap. A new logical request costs one round trip
// to claim it, one per tenant limit it is subject to, and a share of the
// pipelines that the background batcher sends for everyone (claim
// releases, settled costs, breaker and budget counts). A flight's output
// reaches Redis only when a client on another replica joins it.
//
// Redis being unreachable is never a silent fallback to process-local
// state: what needs Redis refuses (coord.ErrUnavailable), Err says so, the
// log says so once, and service resumes when Redis answers again. The
// durable truth stays in the store: a claim here only decides who runs a
// request and who joins it; the store's generations fence every write.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord"
)

// Config configures a Coordinator.
type Config struct {
	// URL is the coordination URL: one Redis server, a server Redis
	// Sentinel fails over, or a Redis Cluster (ParseURL).
	URL string
	// Owner is this gateway's id: the store's record owner, and the name
	// other replicas reach it by.
	Owner string
	// LeaseTTL is how long a claim lasts unless renewed; Renew how often
	// this gateway renews the claims it holds.
	LeaseTTL, Renew time.Duration
	// JoinBuffer bounds the output kept for joiners of one flight.
	JoinBuffer int
	// Clock tells time (default: the system clock).
	Clock clock.Clock
	// Logger receives availability changes (default: discard).
	Logger *slog.Logger
}

// Coordinator is the shared coordination of one gateway. It is safe for
// concurrent use.
type Coordinator struct {
	cfg    Config
	target *Target
	prefix string // of every key and channel
	rdb    goredis.UniversalClient
	local  *coord.Local
	clock  clock.Clock
	log    *slog.Logger
	batch  *batcher
	hub    *hub

	claims   sync.Map // identity → *claim this gateway holds
	fwdMu    sync.Mutex
	forwards map[string]*forwarder // by request id

	downMu sync.Mutex
	down   error // non-nil while Redis is unreachable

	syncMu  sync.Mutex
	syncers []syncer // breakers and budget, synced every syncEvery

	roundTrips atomic.Int64
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
}

// New connects to Redis and starts the coordinator's background work:
// renewing claims, the batcher, and the listener for joins from other
// replicas. It fails if Redis cannot be reached now; once running, an
// outage is reported per call and survived.
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	t, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, target: t, prefix: t.Prefix, rdb: t.newClient(), local: coord.NewLocal(cfg.JoinBuffer), clock: cfg.Clock,
		log: cfg.Logger, forwards: map[string]*forwarder{}, stop: make(chan struct{})}
	c.rdb.AddHook(counter{&c.roundTrips})
	ps, err := c.subscribe(ctx)
	if err != nil {
		_ = c.rdb.Close()
		return nil, fmt.Errorf("coordination %s: %w", t, err)
	}
	c.batch, c.hub = newBatcher(c), newHub(c)
	c.wg.Add(4)
	go c.batch.run()
	go c.syncLoop()
	go c.renewClaims()
	go c.listen(ps)
	return c, nil
}

// quiet is go-redis's logger: silent. Every failure it would print also
// comes back as an error to a caller here, which reports an outage once
// (setDown) rather than on every dial.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { goredis.SetLogger(quiet{}) }

// Close stops the background work, sends what the batcher holds and
// closes the connections.
func (c *Coordinator) Close() error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
	return c.rdb.Close()
}

// RoundTrips is how many round trips to Redis this gateway has made: one
// per command, one per pipeline.
func (c *Coordinator) RoundTrips() int64 { return c.roundTrips.Load() }

// Err is nil while Redis answers, and the reason while it does not.
func (c *Coordinator) Err() error {
	c.downMu.Lock()
	defer c.downMu.Unlock()
	return c.down
}

// Ping asks Redis now (readiness).
func (c *Coordinator) Ping(ctx context.Context) error {
	return c.check(c.rdb.Ping(ctx).Err())
}

// check records what a Redis call's error says of Redis's availability
// and returns it, wrapping coord.ErrUnavailable when Redis could not be
// reached. A reply (even "no such key", or a script's error) is not an
// outage, unless it says the deployment cannot serve (isOutage).
func (c *Coordinator) check(err error) error {
	if err == nil || errors.Is(err, goredis.Nil) || (isReply(err) && !isOutage(err)) {
		c.setDown(nil)
		return err
	}
	err = fmt.Errorf("%w: %v", coord.ErrUnavailable, err)
	c.setDown(err)
	return err
}

// isReply reports whether err is Redis's answer (an error reply) rather
// than a failure to reach it.
func isReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// isOutage reports whether an error reply says the deployment cannot
// serve now: a cluster without a majority or with slots uncovered, a
// server that is a replica now (Sentinel failed it over), still loading
// its data, or refusing writes until it reaches its replicas.
func isOutage(err error) bool {
	if goredis.IsReadOnlyError(err) || goredis.IsClusterDownError(err) || goredis.IsLoadingError(err) ||
		goredis.IsTryAgainError(err) || goredis.IsMasterDownError(err) {
		return true
	}
	_, moved := goredis.IsMovedError(err)
	_, ask := goredis.IsAskError(err)
	return moved || ask || strings.HasPrefix(err.Error(), "NOREPLICAS")
}

func (c *Coordinator) setDown(err error) {
	c.downMu.Lock()
	was := c.down
	c.down = err
	c.downMu.Unlock()
	switch {
	case was == nil && err != nil:
		c.log.Error("coordination unavailable: new requests are refused with 503 coordination_unavailable until Redis answers", "err", err)
	case was != nil && err == nil:
		c.log.Info("coordination restored: Redis answers again")
	}
}

// syncer is shared state with a copy in this gateway, brought up to date
// in the background: sync queues its commands and returns what to do
// with their answers once the pipeline ran.
type syncer interface {
	sync(ctx context.Context, pipe goredis.Pipeliner) func()
}

func (c *Coordinator) addSyncer(s syncer) {
	c.syncMu.Lock()
	c.syncers = append(c.syncers, s)
	c.syncMu.Unlock()
}

// syncLoop syncs the breakers and the budget every syncEvery, all in one
// pipeline; while Redis is down it also finds out when Redis is back.
func (c *Coordinator) syncLoop() {
	defer c.wg.Done()
	t := time.NewTicker(syncEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.syncMu.Lock()
		all := append([]syncer(nil), c.syncers...)
		c.syncMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if len(all) == 0 {
			if c.Err() != nil {
				_ = c.Ping(ctx)
			}
			cancel()
			continue
		}
		pipe := c.rdb.Pipeline()
		var after []func()
		for _, s := range all {
			after = append(after, s.sync(ctx, pipe))
		}
		_, err := pipe.Exec(ctx)
		if errors.Is(err, goredis.Nil) {
			err = nil
		}
		c.check(err)
		for _, f := range after {
			f()
		}
		cancel()
	}
}

// counter is a go-redis hook counting round trips.
type counter struct{ n *atomic.Int64 }

func (counter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h counter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h counter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// Info is what `oncegate check --connect` reports of a Redis deployment.
type Info struct {
	Version string
	Ping    time.Duration
	// Detail describes a Sentinel's or a Cluster's deployment ("" for one
	// server).
	Detail string
}

// Probe connects and says what it found, changing nothing. A cluster
// must be in state ok, and run Redis 7 or later (sharded pub/sub).
func Probe(ctx context.Context, raw string) (*Info, error) {
	t, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	rdb := t.newClient()
	defer rdb.Close()
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("reach %s: %w", t, err)
	}
	info := &Info{Ping: time.Since(start)}
	if m, err := rdb.InfoMap(ctx, "server").Result(); err == nil {
		info.Version = m["Server"]["redis_version"]
	}
	switch t.Mode {
	case Sentinel:
		m, err := rdb.InfoMap(ctx, "replication").Result()
		if err != nil {
			return nil, fmt.Errorf("reach %s: %w", t, err)
		}
		info.Detail = fmt.Sprintf("master %s (%s), %s replica(s) connected", t.Master, m["Replication"]["role"], m["Replication"]["connected_slaves"])
	case Cluster:
		v, err := rdb.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("reach %s: %w", t, err)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(v, "\n") {
			if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = val
			}
		}
		if fields["cluster_state"] != "ok" {
			return nil, fmt.Errorf("reach %s: the cluster's state is %q, not ok", t, fields["cluster_state"])
		}
		if major, _, _ := strings.Cut(info.Version, "."); atoi(major) < 7 {
			return nil, fmt.Errorf("reach %s: Redis %s: a cluster needs Redis 7 or later (sharded pub/sub)", t, info.Version)
		}
		info.Detail = fmt.Sprintf("cluster of %s shard(s), %s node(s), state ok", fields["cluster_size"], fields["cluster_known_nodes"])
	}
	return info, nil
}

// atoi is s's value, 0 if it is not a number.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
