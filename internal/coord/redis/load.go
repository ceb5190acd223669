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
type Loads struct {
	c *Coordinator
	t *load.Table
}

// loadTTL is how long a replica's count of attempts in flight is believed
// without being written again.
const loadTTL = 3 * time.Second

// NewLoads shares the load kept in t of the routes a strategy chooses
// by (load.Table.Shared, read at every sync, so a reload's new routes
// are shared too).
func (c *Coordinator) NewLoads(t *load.Table) *Loads {
	l := &Loads{c: c, t: t}
	c.addSyncer(l)
	return l
}

func (l *Loads) keys(route string) (inflight, quota string) {
	k := l.c.key("route:", route)
	return k + ":inflight", k + ":quota"
}

func (l *Loads) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	now := l.c.clock.Now()
	routes := l.t.Shared()
	if len(routes) == 0 {
		return func() {}
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
