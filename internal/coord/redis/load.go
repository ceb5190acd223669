package redis

import (
	"context"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/load"
)

// Loads shares the routes' load across replicas (docs/routing.md), so
// that least_busy sees the fleet's attempts in flight and quota the
// rate-limit headroom any replica learned. Every sync this gateway writes,
// per route, its attempts in flight (a field of its own in the route's
// hash, stamped with when it lapses, so a dead replica's count ages out)
// and the headroom its provider's headers last gave; it reads the
// others' back into the table. Safe for concurrent use.
//
// Every route's cooling (a provider's long rate-limit hint,
// docs/retries.md) is shared too, whatever the strategy: one hash of
// route → until (Unix ms), where a later cooling wins; a cooling one
// replica learned is in every replica's admission a sync later.
type Loads struct {
	c *Coordinator
	t *load.Table
	// sent is the cooling of each route this gateway last wrote; only
	// the sync loop touches it.
	sent map[string]time.Time
}

// loadTTL is how long a replica's count of attempts in flight is believed
// without being written again.
const loadTTL = 3 * time.Second

// NewLoads shares the load kept in t of the routes a strategy chooses
// by (load.Table.Shared, read at every sync, so a reload's new routes
// are shared too).
func (c *Coordinator) NewLoads(t *load.Table) *Loads {
	l := &Loads{c: c, t: t, sent: map[string]time.Time{}}
	c.addSyncer(l)
	return l
}

func (l *Loads) keys(route string) (inflight, quota string) {
	k := l.c.key("route:", route)
	return k + ":inflight", k + ":quota"
}

// scriptCool writes a route's cooling unless a later one is there, and
// keeps the hash as long as its longest cooling. KEYS: the hash. ARGV:
// route, until ms, now ms.
var scriptCool = goredis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local untilMs, now = tonumber(ARGV[2]), tonumber(ARGV[3])
if untilMs > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < untilMs - now then redis.call('PEXPIRE', KEYS[1], untilMs - now) end
return 1`)

// syncCooling writes the coolings learned here since the last sync and
// reads back the fleet's.
func (l *Loads) syncCooling(ctx context.Context, pipe goredis.Pipeliner, now time.Time) func() {
	key := l.c.key("cool", "")
	type write struct {
		route string
		until time.Time
		cmd   *goredis.Cmd
	}
	var writes []write
	for _, route := range l.t.Routes() {
		if until := l.t.Cooled(route); until.After(now) && !until.Equal(l.sent[route]) {
			writes = append(writes, write{route, until, scriptCool.Eval(ctx, pipe, []string{key}, route, until.UnixMilli(), now.UnixMilli())})
		}
	}
	all := pipe.HGetAll(ctx, key)
	return func() {
		for _, w := range writes {
			if w.cmd.Err() == nil {
				l.sent[w.route] = w.until // else written again at the next sync
			}
		}
		for route, v := range all.Val() {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > now.UnixMilli() {
				l.t.SetRemoteCool(route, time.UnixMilli(ms))
			}
		}
	}
}

func (l *Loads) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	now := l.c.clock.Now()
	cooled := l.syncCooling(ctx, pipe, now)
	routes := l.t.Shared()
	if len(routes) == 0 {
		return cooled
	}
	type cmds struct {
		inflight *goredis.MapStringStringCmd
		quota    *goredis.StringCmd
	}
	got := make([]cmds, len(routes))
	for i, route := range routes {
		kIn, kQ := l.keys(route)
		pipe.HSet(ctx, kIn, l.c.cfg.Owner, strconv.Itoa(l.t.InFlight(route))+":"+strconv.FormatInt(now.Add(loadTTL).UnixMilli(), 10))
		pipe.PExpire(ctx, kIn, 10*loadTTL)
		if left, until := l.t.Learned(route); until.After(now) {
			// A later reset wins: it is the newer news.
			pipe.Eval(ctx, `local v = redis.call('GET', KEYS[1])
if v then local u = tonumber(string.match(v, ':(%d+)$')) if u and u > tonumber(ARGV[2]) then return 0 end end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3]) return 1`,
				[]string{kQ}, strconv.FormatFloat(left, 'g', -1, 64), until.UnixMilli(), max(1, until.Sub(now).Milliseconds()))
		}
		got[i] = cmds{pipe.HGetAll(ctx, kIn), pipe.Get(ctx, kQ)}
	}
	return func() {
		cooled()
		for i, route := range routes {
			others := 0
			for owner, v := range got[i].inflight.Val() {
				n, exp, ok := strings.Cut(v, ":")
				count, err1 := strconv.Atoi(n)
				ms, err2 := strconv.ParseInt(exp, 10, 64)
				if owner == l.c.cfg.Owner || !ok || err1 != nil || err2 != nil || ms < now.UnixMilli() {
					continue
				}
				others += max(0, count)
			}
			left, until := 1.0, time.Time{}
			if v, err := got[i].quota.Result(); err == nil {
				if a, b, ok := strings.Cut(v, ":"); ok {
					f, err1 := strconv.ParseFloat(a, 64)
					ms, err2 := strconv.ParseInt(b, 10, 64)
					if err1 == nil && err2 == nil && f >= 0 && f <= 1 {
						left, until = f, time.UnixMilli(ms)
					}
				}
			}
			l.t.SetRemote(route, others, left, until)
		}
	}
}
