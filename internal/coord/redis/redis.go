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
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord"
)

// Config configures a Coordinator.
type Config struct {
	// URL is the coordination URL: redis://[user:password@]host:port/db
	// (or rediss:// for TLS).
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
	prefix string // of every key and channel
	rdb    *goredis.Client
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

// What keys and channels are named, after the coordinator's prefix
// ("oncegate:" unless the URL's key_prefix says otherwise).
const (
	prefixClaim  = "claim:"
	prefixOutput = "out:"
	prefixOwner  = "owner:"
	prefixSeen   = "seen:"
)

// New connects to Redis and starts the coordinator's background work:
// renewing claims, the batcher, and the listener for joins from other
// replicas. It fails if Redis cannot be reached now; once running, an
// outage is reported per call and survived.
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	u, prefix, err := SplitPrefix(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("coordination: %w", err)
	}
	opts, err := goredis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("coordination: %w", err)
	}
	// Fail fast when Redis is down: a new request waits for a
	// connection at most this long before it is refused.
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	opts.MaxRetries = 0    // the gateway owns retries; a command is sent once
	opts.DialerRetries = 1 // and a connection is tried once: an outage is reported at once, not after backoffs
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, prefix: prefix, rdb: goredis.NewClient(opts), local: coord.NewLocal(cfg.JoinBuffer), clock: cfg.Clock,
		log: cfg.Logger, forwards: map[string]*forwarder{}, stop: make(chan struct{})}
	c.rdb.AddHook(counter{&c.roundTrips})
	ps, err := c.subscribe(ctx)
	if err != nil {
		_ = c.rdb.Close()
		return nil, fmt.Errorf("coordination %s: %w", Redact(cfg.URL), err)
	}
	c.batch, c.hub = newBatcher(c), newHub(c)
	c.wg.Add(5)
	go c.batch.run()
	go c.hub.run()
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
// outage.
func (c *Coordinator) check(err error) error {
	if err == nil || errors.Is(err, goredis.Nil) || isReply(err) {
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

// SplitPrefix takes the key_prefix parameter oncegate adds to a Redis URL
// out of it: every key and channel starts with it, so that several
// deployments (or tests) can share one Redis. Default "oncegate:".
func SplitPrefix(raw string) (redisURL, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	q := u.Query()
	prefix = "oncegate:"
	if q.Has("key_prefix") {
		if prefix = q.Get("key_prefix"); prefix == "" {
			return "", "", fmt.Errorf("key_prefix is empty")
		}
		q.Del("key_prefix")
		u.RawQuery = q.Encode()
	}
	return u.String(), prefix, nil
}

// Redact returns a Redis URL fit for logs: its password hidden.
func Redact(raw string) string {
	u, prefix, err := SplitPrefix(raw)
	if err != nil {
		return "redis://…"
	}
	opts, err := goredis.ParseURL(u)
	if err != nil {
		return "redis://…"
	}
	s := fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB)
	if prefix != "oncegate:" {
		s += "?key_prefix=" + url.QueryEscape(prefix)
	}
	return s
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

// Info is what `oncegate check --connect` reports of a Redis server.
type Info struct {
	Version string
	Ping    time.Duration
}

// Probe connects and says what it found, changing nothing.
func Probe(ctx context.Context, raw string) (*Info, error) {
	u, _, err := SplitPrefix(raw)
	if err != nil {
		return nil, fmt.Errorf("coordination: %w", err)
	}
	opts, err := goredis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("coordination: %w", err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("reach %s: %w", Redact(raw), err)
	}
	info := &Info{Ping: time.Since(start)}
	if m, err := rdb.InfoMap(ctx, "server").Result(); err == nil {
		info.Version = m["Server"]["redis_version"]
	}
	return info, nil
}
