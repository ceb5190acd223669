package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// KeyFeed tells every replica which virtual keys changed (issued,
// updated, revoked, rotated), so that each drops what it cached of them
// (docs/keys-and-teams.md). A change bumps a version counter and records the key
// under it in a sorted set; every replica reads what is newer than the
// version it last saw with the breakers' sync, every 100 ms, in the same
// pipeline — no round trip of its own, and no read of the store per
// request. Safe for concurrent use.
type KeyFeed struct {
	c    *Coordinator
	mu   sync.Mutex
	seen int64 // the last version read; -1 before the first read
	f    func(ids []string, all bool)
}

// keyChangesKept is how many changes the sorted set keeps: a replica
// further behind than that drops its whole cache.
const keyChangesKept = 10000

// scriptKeyChanged bumps the version and records the key under it.
// KEYS: version, changes. ARGV: key id, how many to keep.
var scriptKeyChanged = goredis.NewScript(`
local v = redis.call('INCR', KEYS[1])
redis.call('ZADD', KEYS[2], v, ARGV[1] .. '#' .. v)
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[2]) - 1)
return v`)

// NewKeyFeed starts following the changes of virtual keys (see Follow).
func (c *Coordinator) NewKeyFeed() *KeyFeed {
	k := &KeyFeed{c: c, seen: -1, f: func([]string, bool) {}}
	c.addSyncer(k)
	return k
}

// Follow makes f hear of the keys that change: the ids that changed
// since the last call, or all true when it cannot tell which (Redis lost
// them, or this replica fell too far behind) — then every cached key
// must go.
func (k *KeyFeed) Follow(f func(ids []string, all bool)) {
	k.mu.Lock()
	k.f = f
	k.mu.Unlock()
}

func (k *KeyFeed) names() (version, changes string) {
	k0 := k.c.key("keys", "") // one hash tag for both: scriptKeyChanged writes both
	return k0 + ":version", k0 + ":changes"
}

// Changed tells every replica that key id changed.
func (k *KeyFeed) Changed(ctx context.Context, id string) error {
	ver, changes := k.names()
	if err := k.c.check(scriptKeyChanged.Run(ctx, k.c.rdb, []string{ver, changes}, id, keyChangesKept).Err()); err != nil {
		return fmt.Errorf("tell the replicas key %s changed: %w", id, err)
	}
	return nil
}

// sync reads the version and the changes after the last one seen.
func (k *KeyFeed) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	ver, changes := k.names()
	k.mu.Lock()
	seen := k.seen
	k.mu.Unlock()
	vcmd := pipe.Get(ctx, ver)
	ccmd := pipe.ZRangeByScoreWithScores(ctx, changes, &goredis.ZRangeBy{Min: "(" + strconv.FormatInt(max(seen, 0), 10), Max: "+inf"})
	return func() { k.apply(seen, vcmd, ccmd) }
}

func (k *KeyFeed) apply(seen int64, vcmd *goredis.StringCmd, ccmd *goredis.ZSliceCmd) {
	v, err := vcmd.Int64()
	if errors.Is(err, goredis.Nil) {
		v, err = 0, nil
	}
	if err != nil || ccmd.Err() != nil {
		return // Redis is down: read again next time
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen != seen {
		return // another sync got there first
	}
	switch {
	case seen < 0:
		// The first read: keys cached before it may have changed since
		// (the feed was not read yet, or Redis did not answer).
		k.f(nil, true)
	case v < seen: // Redis lost the counter (a flush, a restart)
		k.f(nil, true)
	case v > seen:
		zs := ccmd.Val()
		if len(zs) == 0 || int64(zs[0].Score) > seen+1 {
			k.f(nil, true) // fell behind what the set keeps
			break
		}
		ids := make([]string, 0, len(zs))
		for _, z := range zs {
			if int64(z.Score) > v {
				break
			}
			m, _ := z.Member.(string)
			if i := strings.LastIndexByte(m, '#'); i >= 0 {
				ids = append(ids, m[:i])
			}
		}
		k.f(ids, false)
	}
	k.seen = v
}
