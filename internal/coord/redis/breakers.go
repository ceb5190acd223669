package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/breaker"
)

// Breakers are the routes' circuit breakers shared by every
// replica: one state per route in Redis, with its generation, and its
// counts over the rolling window, which every replica adds to. The
// common path asks nothing of Redis: a closed breaker admits from this
// gateway's copy of the state, and outcomes are counted here and sent
// with the next sync, every syncEvery, which also brings back the state
// other replicas' outcomes made — a breaker opened by failures seen on
// one replica is open on all of them a sync later. What must be exact
// fleet-wide goes to Redis at once: a half-open breaker's probes, and
// their outcomes. Safe for concurrent use.
type Breakers struct {
	c      *Coordinator
	cfg    breaker.Config
	id     string // this gateway's, among the replicas reporting attempts in flight
	mu     sync.Mutex
	routes map[string]*routeState
	order  []string
}

// routeState is this gateway's copy of a route's breaker, and the
// outcomes it has not sent yet (of generation gen).
type routeState struct {
	state    breaker.State
	gen      int64
	openedAt time.Time
	ok, fail int64
	// inflight counts attempts admitted here while closed, in generation
	// gen, whose outcome is not in (breaker.Opens).
	inflight int64
}

var _ interface {
	Allows(string) bool
	Acquire(string) (breaker.Ticket, bool)
	Done(string, breaker.Ticket, breaker.Outcome)
} = (*Breakers)(nil)

// syncEvery is how often the breakers and the budget are synced.
const syncEvery = 100 * time.Millisecond

// The breaker hash `oncegate:breaker:ROUTE` holds state, gen, opened
// (Unix ms) and probes; its window counts are `…:w:SLOT` hashes of ok and
// fail, a tenth of the window each. Every script first half-opens an
// open breaker whose open_for has passed (generation + 1), so all
// replicas agree on the generation a state has.
const breakerLib = `
local function refresh(key, now, openFor)
  local st = tonumber(redis.call('HGET', key, 'state') or '0')
  local gen = tonumber(redis.call('HGET', key, 'gen') or '1')
  local opened = tonumber(redis.call('HGET', key, 'opened') or '0')
  if st == 2 and now >= opened + openFor then
    st, gen = 1, gen + 1
    redis.call('HSET', key, 'state', st, 'gen', gen, 'probes', 0, 'pok', 0, 'pfail', 0)
  end
  return st, gen, opened
end
local function transition(key, st, gen, now)
  gen = gen + 1
  redis.call('DEL', key .. ':inf')
  redis.call('HSET', key, 'state', st, 'gen', gen, 'probes', 0, 'pok', 0, 'pfail', 0)
  if st == 2 then redis.call('HSET', key, 'opened', now) end
  redis.call('HINCRBY', key, 'epoch', 1) -- window counts of an older epoch are ignored
  return gen
end
`

// scriptBreakerSync adds a replica's outcomes (of generation ARGV[4]) to
// the window, notes how many of its attempts are in flight, and opens the
// breaker when the window's failures are failure_ratio of every attempt
// admitted — the fleet's in flight counted as not failed
// (breaker.Opens). ARGV: now ms, ok, fail, gen, window ms, min requests,
// failure ratio, open_for ms, in flight, replica id. Returns state, gen,
// opened. A replica's in-flight count lasts until its next sync, or a
// second if it stops syncing.
var scriptBreakerSync = goredis.NewScript(breakerLib + `
local key, now = KEYS[1], tonumber(ARGV[1])
local st, gen, opened = refresh(key, now, tonumber(ARGV[8]))
local ok, fail, window = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if st == 0 and tonumber(ARGV[4]) == gen then
  redis.call('HSET', key .. ':inf', ARGV[10], ARGV[9] .. ':' .. now)
  redis.call('PEXPIRE', key .. ':inf', 10000)
end
if st == 0 and tonumber(ARGV[4]) == gen and ok + fail > 0 then
  local width = math.floor(window / 10)
  local slot = math.floor(now / width)
  local epoch = redis.call('HGET', key, 'epoch') or '0'
  local wkey = key .. ':w:' .. epoch .. ':' .. slot
  redis.call('HINCRBY', wkey, 'ok', ok)
  redis.call('HINCRBY', wkey, 'fail', fail)
  redis.call('PEXPIRE', wkey, 2 * window)
  local tok, tfail = 0, 0
  for s = slot - 9, slot do
    local v = redis.call('HMGET', key .. ':w:' .. epoch .. ':' .. s, 'ok', 'fail')
    tok = tok + tonumber(v[1] or '0')
    tfail = tfail + tonumber(v[2] or '0')
  end
  local total = tok + tfail
  local inflight = 0
  local inf = redis.call('HGETALL', key .. ':inf')
  for i = 2, #inf, 2 do
    local n, at = string.match(inf[i], '^(%d+):(%d+)$')
    if n and now - tonumber(at) <= 1000 then inflight = inflight + tonumber(n) end
  end
  if total >= tonumber(ARGV[6]) and tfail >= tonumber(ARGV[7]) * (total + inflight) then
    gen = transition(key, 2, gen, now)
    st, opened = 2, now
  end
end
return {st, gen, opened}`)

// scriptBreakerAcquire admits an attempt on a breaker that is not closed
// here: a half-open breaker's probe slot, fleet-wide. ARGV: now ms,
// half-open probes, open_for ms. Returns admitted (0/1), probe (0/1),
// state, gen, opened.
var scriptBreakerAcquire = goredis.NewScript(breakerLib + `
local key, now = KEYS[1], tonumber(ARGV[1])
local st, gen, opened = refresh(key, now, tonumber(ARGV[3]))
if st == 0 then return {1, 0, st, gen, opened} end
if st == 1 and tonumber(redis.call('HGET', key, 'probes') or '0') < tonumber(ARGV[2]) then
  redis.call('HINCRBY', key, 'probes', 1)
  return {1, 1, st, gen, opened}
end
return {0, 0, st, gen, opened}`)

// scriptBreakerProbe reports a probe's outcome, counted fleet-wide:
// closeAt successes (one) close the breaker, failAt failures re-open it
// (breaker.ProbeVerdicts). ARGV: now ms, gen, outcome (0 success, 1
// failure, 2 ignore), open_for ms, failAt, closeAt. Returns state, gen,
// opened.
var scriptBreakerProbe = goredis.NewScript(breakerLib + `
local key, now = KEYS[1], tonumber(ARGV[1])
local st, gen, opened = refresh(key, now, tonumber(ARGV[4]))
if st == 1 and gen == tonumber(ARGV[2]) then
  redis.call('HINCRBY', key, 'probes', -1)
  if ARGV[3] == '0' and redis.call('HINCRBY', key, 'pok', 1) >= tonumber(ARGV[6]) then
    gen = transition(key, 0, gen, now)
    st = 0
  elseif ARGV[3] == '1' and redis.call('HINCRBY', key, 'pfail', 1) >= tonumber(ARGV[5]) then
    gen = transition(key, 2, gen, now)
    st, opened = 2, now
  end
end
return {st, gen, opened}`)

// NewBreakers returns the shared breakers of routes.
func (c *Coordinator) NewBreakers(cfg breaker.Config, routes []string) *Breakers {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	b := &Breakers{c: c, cfg: cfg, id: hex.EncodeToString(id), routes: map[string]*routeState{}}
	for _, r := range routes {
		if _, dup := b.routes[r]; !dup {
			b.routes[r] = &routeState{gen: 1}
			b.order = append(b.order, r)
		}
	}
	c.addSyncer(b)
	return b
}

// AddRoutes gives routes this gateway does not know yet a copy of their
// breaker (a reload added them); it is filled at the next sync.
func (b *Breakers) AddRoutes(routes []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range routes {
		if _, dup := b.routes[r]; !dup {
			b.routes[r] = &routeState{gen: 1}
			b.order = append(b.order, r)
		}
	}
}

// key is route's breaker hash; its window counts and its replicas' in
// flight are keys made from it by appending, in its slot.
func (b *Breakers) key(route string) string { return b.c.key("breaker:", route) }

// Allows reports whether route would admit an attempt now, by this
// gateway's copy of its state.
func (b *Breakers) Allows(route string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.routes[route]
	if s == nil {
		return true
	}
	switch s.state {
	case breaker.Open:
		return !b.c.clock.Now().Before(s.openedAt.Add(b.cfg.OpenFor))
	default:
		return true
	}
}

// Acquire admits an attempt on route: at once while the breaker is
// closed here; otherwise Redis decides (a half-open breaker's probes are
// counted fleet-wide). Redis unreachable refuses.
func (b *Breakers) Acquire(route string) (breaker.Ticket, bool) {
	b.mu.Lock()
	s := b.routes[route]
	if s == nil {
		b.mu.Unlock()
		return breaker.Ticket{State: breaker.Closed}, true
	}
	if s.state == breaker.Closed {
		t := breaker.Ticket{State: breaker.Closed, Generation: s.gen}
		s.inflight++
		b.mu.Unlock()
		return t, true
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := scriptBreakerAcquire.Run(ctx, b.c.rdb, []string{b.key(route)}, b.c.clock.Now().UnixMilli(),
		b.cfg.HalfOpenProbes, b.cfg.OpenFor.Milliseconds()).Int64Slice()
	if b.c.check(err) != nil || len(v) != 5 {
		return breaker.Ticket{State: breaker.Open}, false
	}
	b.update(route, v[2:])
	t := breaker.ProbeTicket(breaker.State(v[2]), v[3], v[1] == 1)
	return t, v[0] == 1
}

// Done reports an admitted attempt's outcome: a probe's at once, any
// other's with the next sync.
func (b *Breakers) Done(route string, t breaker.Ticket, o breaker.Outcome) {
	if t.Probe() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		failAt, closeAt := breaker.ProbeVerdicts(b.cfg)
		v, err := scriptBreakerProbe.Run(ctx, b.c.rdb, []string{b.key(route)}, b.c.clock.Now().UnixMilli(),
			t.Generation, int(o), b.cfg.OpenFor.Milliseconds(), failAt, closeAt).Int64Slice()
		if b.c.check(err) == nil && len(v) == 3 {
			b.update(route, v)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.routes[route]
	if s == nil || t.Generation != s.gen || s.state != breaker.Closed {
		return // an outcome of an older generation changes nothing
	}
	s.inflight = max(0, s.inflight-1)
	switch o {
	case breaker.Success:
		s.ok++
	case breaker.Failure:
		s.fail++
	}
}

// update takes state, gen, opened from Redis into this gateway's copy,
// unless it already has a newer generation.
func (b *Breakers) update(route string, v []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.routes[route]
	if s == nil || v[1] < s.gen {
		return
	}
	if v[1] > s.gen {
		s.ok, s.fail, s.inflight = 0, 0, 0 // outcomes of the old generation are stale
	}
	s.state, s.gen, s.openedAt = breaker.State(v[0]), v[1], time.UnixMilli(v[2])
}

// sync queues every route's unsent outcomes and the state to bring back.
func (b *Breakers) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	type pending struct {
		route string
		cmd   *goredis.Cmd
	}
	now := b.c.clock.Now().UnixMilli()
	var all []pending
	b.mu.Lock()
	for _, r := range b.order {
		s := b.routes[r]
		cmd := scriptBreakerSync.Eval(ctx, pipe, []string{b.key(r)}, now, s.ok, s.fail, s.gen,
			b.cfg.Window.Milliseconds(), b.cfg.MinRequests, strconv.FormatFloat(b.cfg.FailureRatio, 'f', -1, 64), b.cfg.OpenFor.Milliseconds(),
			s.inflight, b.id)
		s.ok, s.fail = 0, 0
		all = append(all, pending{r, cmd})
	}
	b.mu.Unlock()
	return func() {
		for _, p := range all {
			if v, err := p.cmd.Int64Slice(); err == nil && len(v) == 3 {
				b.update(p.route, v)
			}
		}
	}
}

// States calls f with every route's state as this gateway knows it.
func (b *Breakers) States(f func(route string, st breaker.State, gen int64)) {
	b.mu.Lock()
	type row struct {
		r   string
		st  breaker.State
		gen int64
	}
	rows := make([]row, 0, len(b.order))
	now := b.c.clock.Now()
	for _, r := range b.order {
		s := b.routes[r]
		st := s.state
		if st == breaker.Open && !now.Before(s.openedAt.Add(b.cfg.OpenFor)) {
			st = breaker.HalfOpen
		}
		rows = append(rows, row{r, st, s.gen})
	}
	b.mu.Unlock()
	for _, x := range rows {
		f(x.r, x.st, x.gen)
	}
}
