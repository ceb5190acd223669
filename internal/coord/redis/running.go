package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Running counts requests in progress per name (a virtual key's
// max_concurrent, docs/keys-and-teams.md) across every replica. Each request holds
// a lease: a member of the name's sorted set whose score is when the
// lease expires. Admission drops expired leases and adds one only while
// fewer than the limit remain, atomically in a script; a release removes
// its lease. The coordinator's sync renews the leases this replica holds
// every lease.renew, so a long request keeps its place, and a replica
// that dies stops renewing: its leases lapse at most lease.ttl after
// their last renewal. Safe for concurrent use.
type Running struct {
	c          *Coordinator
	ns         string
	ttl, renew time.Duration
	seq        atomic.Int64
	mu         sync.Mutex
	held       map[string]string // lease (member) → its sorted set
	renewed    time.Time         // when held leases were last renewed
}

// scriptEnter admits a request if fewer than the limit hold leases.
// KEYS: the sorted set. ARGV: now ms, limit, member, expiry ms, the
// set's life ms. Returns 1 if admitted, else 0.
var scriptEnter = goredis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1`)

// NewRunning returns the shared count of requests in progress, its sets
// named ns (such as "keyrun:") and the name. Leases last the
// coordinator's lease TTL and are renewed as often as its claims.
func (c *Coordinator) NewRunning(ns string) *Running {
	ttl, renew := c.cfg.LeaseTTL, c.cfg.Renew
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	if renew <= 0 || renew > ttl/2 {
		renew = ttl / 3
	}
	r := &Running{c: c, ns: ns, ttl: ttl, renew: renew, held: map[string]string{}, renewed: c.clock.Now()}
	c.addSyncer(r)
	return r
}

func (r *Running) key(name string) string { return r.c.key(r.ns, name) }

// Enter admits one more request of name when fewer than limit hold a
// lease, until release is called; ok is false when limit already do. An
// error (wrapping coord.ErrUnavailable) says Redis could not be asked.
func (r *Running) Enter(name string, limit int) (release func(), ok bool, err error) {
	key := r.key(name)
	member := r.c.cfg.Owner + ":" + strconv.FormatInt(r.seq.Add(1), 36)
	now := r.c.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := scriptEnter.Run(ctx, r.c.rdb, []string{key}, now.UnixMilli(), limit, member,
		now.Add(r.ttl).UnixMilli(), (2 * r.ttl).Milliseconds()).Int()
	if err = r.c.check(err); err != nil {
		return nil, false, fmt.Errorf("count the requests in progress of %s: %w", name, err)
	}
	if n != 1 {
		return nil, false, nil
	}
	r.mu.Lock()
	r.held[member] = key
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { r.release(key, member) }) }, true, nil
}

// release removes a lease now: the next request may enter at once. If
// Redis does not answer, the lease lapses within the TTL.
func (r *Running) release(key, member string) {
	r.mu.Lock()
	delete(r.held, member)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r.c.check(r.c.rdb.ZRem(ctx, key, member).Err())
}

// Held is how many leases this replica holds now.
func (r *Running) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// sync renews the leases this replica holds, every renew: each moves its
// expiry a TTL ahead, unless it lapsed already (ZADD XX: a lapsed lease
// is not brought back, its place may be taken).
func (r *Running) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	now := r.c.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.renewed) < r.renew {
		return func() {}
	}
	r.renewed = now
	until := float64(now.Add(r.ttl).UnixMilli())
	for member, key := range r.held {
		pipe.ZAddXX(ctx, key, goredis.Z{Score: until, Member: member})
		pipe.PExpire(ctx, key, 2*r.ttl)
	}
	return func() {}
}
