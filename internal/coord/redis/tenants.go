package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/quota"
)

// Tenants are the tenants' request rates and daily cost ceilings
// shared by every replica. A rate is a token bucket in Redis; a
// day's spend is a hash of what was charged and what is reserved, with
// each reservation kept apart until it settles — or until its attempt
// must have ended, when a replica that died with it leaves it behind:
// then its worst case is charged, as recovery charges it in the receipt.
// Reservations are taken atomically, so replicas together never reserve
// past the ceiling. A day's spend is seeded from the store the first
// time a replica finds it missing (a new deployment, or Redis restarted
// empty), so neither a restart nor another replica hands a tenant a
// fresh budget. Safe for concurrent use.
type Tenants struct {
	c *Coordinator
	// ns names the keys ("tenant:"); period numbers the period a
	// ceiling holds for (gw.Day; a virtual key's month or minute).
	ns     string
	period func(time.Time) int64
	limits atomic.Pointer[map[string]quota.Tenant]
	spend  func(ctx context.Context, day int64) (map[string]int64, error)
	seq    atomic.Int64
	mu     sync.Mutex
	// known is what each tenant was charged today, as of Redis's last
	// answer: never more than the truth (a day's charges only grow), so
	// an allowance made from it never refuses what Redis would admit.
	known map[string]gw.NanoUSD
	day   int64
}

var _ interface {
	Take(string) (bool, time.Duration, error)
	Allowance(string) (gw.NanoUSD, bool)
	Reserve(string, gw.NanoUSD, time.Time) (quota.Reservation, bool)
	Settle(quota.Reservation, gw.NanoUSD)
	Charged(string) gw.NanoUSD
} = (*Tenants)(nil)

// rateLib takes a token from a tenant's bucket (key), which holds a
// minute's worth (rpm) and refills continuously; it returns taken (0/1)
// and, when refused, the ms until a token.
const rateLib = `
local function take(key, now, rpm)
  local v = redis.call('HMGET', key, 'tokens', 'at')
  local tokens, at = tonumber(v[1] or rpm), tonumber(v[2] or now)
  local rate = rpm / 60000
  if now > at then tokens = math.min(rpm, tokens + (now - at) * rate) end
  local ok, wait = 0, 0
  if tokens >= 1 then
    tokens, ok = tokens - 1, 1
  else
    wait = math.ceil((1 - tokens) / rate)
  end
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', math.max(now, at))
  redis.call('PEXPIRE', key, 120000)
  return ok, wait
end
`

// scriptRate takes a token. ARGV: now ms, requests per minute. Returns
// taken (0/1) and, when refused, ms until a token.
var scriptRate = goredis.NewScript(rateLib + `
local ok, wait = take(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
return {ok, wait}`)

// tenantNS names the tenants' keys.
const tenantNS = "tenant:"

// rateKey is the bucket of tenant (or virtual key) id in namespace ns.
func (c *Coordinator) rateKey(ns, id string) string { return c.key(ns, id) + ":rate" }

// The day's spend: KEYS[1] the day hash (charged, reserved), KEYS[2] a
// sorted set of reservations by when their attempts end, KEYS[3] a hash
// of their amounts ("x…" once lapsed and charged). All live two days.
const spendLib = `
local function lapse(k, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', k[2], '-inf', now)) do
    local a = tonumber(redis.call('HGET', k[3], id) or '0')
    redis.call('HINCRBY', k[1], 'reserved', -a)
    redis.call('HINCRBY', k[1], 'charged', a)
    redis.call('HSET', k[3], id, 'x' .. a)
    redis.call('ZREM', k[2], id)
  end
end
local function keep(k)
  for i = 1, 3 do redis.call('PEXPIRE', k[i], 172800000) end
end
`

// scriptReserve reserves an amount if it fits under the ceiling. ARGV:
// id, amount, ceiling, now ms, until ms. Returns -1 if the day is not
// seeded yet; else reserved (0/1), charged, reserved total.
var scriptReserve = goredis.NewScript(spendLib + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0, 0} end
lapse(KEYS, tonumber(ARGV[4]))
local charged = tonumber(redis.call('HGET', KEYS[1], 'charged') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
local amount = tonumber(ARGV[2])
if charged + reserved + amount > tonumber(ARGV[3]) then return {0, charged, reserved} end
redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], amount)
keep(KEYS)
return {1, charged, reserved + amount}`)

// scriptSettle releases a reservation and charges the attempt's cost; a
// reservation that lapsed was charged its worst case, so only the
// difference is charged now. ARGV: id, cost.
var scriptSettle = goredis.NewScript(spendLib + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local a = redis.call('HGET', KEYS[3], ARGV[1])
local cost = tonumber(ARGV[2])
if not a then
  redis.call('HINCRBY', KEYS[1], 'charged', cost)
elseif string.sub(a, 1, 1) == 'x' then
  redis.call('HINCRBY', KEYS[1], 'charged', cost - tonumber(string.sub(a, 2)))
else
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(a))
  redis.call('HINCRBY', KEYS[1], 'charged', cost)
  redis.call('ZREM', KEYS[2], ARGV[1])
end
redis.call('HDEL', KEYS[3], ARGV[1])
return 1`)

// scriptSeed sets a day's charged spend from the store unless the day
// exists. ARGV: charged.
var scriptSeed = goredis.NewScript(spendLib + `
if redis.call('HSETNX', KEYS[1], 'charged', ARGV[1]) == 1 then
  redis.call('HSETNX', KEYS[1], 'reserved', 0)
end
keep(KEYS)
return 1`)

// scriptSpent reads a day's charged and reserved after lapsing what is
// due. ARGV: now ms. Returns -1 if the day is not seeded.
var scriptSpent = goredis.NewScript(spendLib + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
lapse(KEYS, tonumber(ARGV[1]))
return {tonumber(redis.call('HGET', KEYS[1], 'charged') or '0'), tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')}`)

// NewTenants returns the shared limits of tenants; spend reads a day's
// charges from the store, to seed a day Redis does not have.
func (c *Coordinator) NewTenants(limits map[string]quota.Tenant, spend func(ctx context.Context, day int64) (map[string]int64, error)) *Tenants {
	t := &Tenants{c: c, ns: tenantNS, period: gw.Day, spend: spend, known: map[string]gw.NanoUSD{}}
	t.SetLimits(limits)
	return t
}

// NewPeriodic returns shared limits like NewTenants' whose ceilings
// (quota.Tenant.CostPerDay) hold per period (quota.Month, quota.Minute,
// gw.Day) under their own names (ns, such as "keymonth:"): a virtual
// key's day, month and tokens per minute (docs/keys-and-teams.md). spend reads a
// period's charges from the store when Redis lacks it.
func (c *Coordinator) NewPeriodic(ns string, period func(time.Time) int64, limits map[string]quota.Tenant,
	spend func(ctx context.Context, period int64) (map[string]int64, error)) *Tenants {
	t := &Tenants{c: c, ns: ns, period: period, spend: spend, known: map[string]gw.NanoUSD{}}
	t.SetLimits(limits)
	return t
}

// SetLimits replaces the tenants' limits (a reload). What Redis holds —
// buckets, the day's charges and reservations — is kept.
func (t *Tenants) SetLimits(limits map[string]quota.Tenant) {
	cp := make(map[string]quota.Tenant, len(limits))
	for id, l := range limits {
		cp[id] = l
	}
	t.limits.Store(&cp)
}

func (t *Tenants) spendKeys(tenant string, day int64) []string {
	k := t.c.key(t.ns, tenant+":"+strconv.FormatInt(day, 10)) // one hash tag: every spend script writes all three
	return []string{k, k + ":resv", k + ":amt"}
}

// Take counts one logical request against the tenant's rate.
func (t *Tenants) Take(tenant string) (bool, time.Duration, error) {
	lim := (*t.limits.Load())[tenant]
	if lim.RequestsPerMinute <= 0 {
		return true, 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := scriptRate.Run(ctx, t.c.rdb, []string{t.c.rateKey(t.ns, tenant)}, t.c.clock.Now().UnixMilli(), lim.RequestsPerMinute).Int64Slice()
	if err = t.c.check(err); err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("rate script: %v", v)
	}
	return v[0] == 1, time.Duration(v[1]) * time.Millisecond, nil
}

// Allowance is what the tenant may still reserve today, as far as this
// gateway knows: the ceiling less what Redis last said was charged. It
// leaves out reservations, which settle for less than they hold, so it
// errs towards trying: Reserve, atomic in Redis, is what refuses.
func (t *Tenants) Allowance(tenant string) (gw.NanoUSD, bool) {
	lim := (*t.limits.Load())[tenant]
	if lim.CostPerDay <= 0 {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.period(t.c.clock.Now()); d != t.day {
		t.day, t.known = d, map[string]gw.NanoUSD{}
	}
	return max(0, lim.CostPerDay-t.known[tenant]), true
}

func (t *Tenants) learn(tenant string, day int64, spent gw.NanoUSD) {
	t.mu.Lock()
	if day == t.day || t.day == 0 {
		t.day = day
		t.known[tenant] = spent
	}
	t.mu.Unlock()
}

// Reserve sets an attempt's worst case aside until it settles, or until
// `until` (its attempt must have ended then; after, it is charged).
// Redis unreachable refuses.
func (t *Tenants) Reserve(tenant string, amount gw.NanoUSD, until time.Time) (quota.Reservation, bool) {
	lim := (*t.limits.Load())[tenant]
	now := t.c.clock.Now()
	day := t.period(now)
	r := quota.Reservation{Tenant: tenant, Amount: amount, Day: day}
	if lim.CostPerDay <= 0 {
		return r, true
	}
	r.ID = t.c.cfg.Owner + ":" + strconv.FormatInt(t.seq.Add(1), 36)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for range 2 {
		v, err := scriptReserve.Run(ctx, t.c.rdb, t.spendKeys(tenant, day), r.ID, int64(amount), int64(lim.CostPerDay),
			now.UnixMilli(), until.UnixMilli()).Int64Slice()
		if t.c.check(err) != nil || len(v) != 3 {
			return quota.Reservation{}, false
		}
		if v[0] == -1 {
			if t.seed(ctx, tenant, day) != nil {
				return quota.Reservation{}, false
			}
			continue
		}
		t.learn(tenant, day, gw.NanoUSD(v[1]))
		if v[0] == 1 {
			return r, true
		}
		return quota.Reservation{}, false
	}
	return quota.Reservation{}, false
}

// seed gives Redis a day's spend from the store.
func (t *Tenants) seed(ctx context.Context, tenant string, day int64) error {
	spend, err := t.spend(ctx, day)
	if err != nil {
		t.c.log.Error("seed a tenant's spend from the store", "tenant", tenant, "err", err)
		return err
	}
	return t.c.check(scriptSeed.Run(ctx, t.c.rdb, t.spendKeys(tenant, day), spend[tenant]).Err())
}

// Settle releases a reservation and charges the attempt's cost, in the
// background — with the next pipeline, usually the request's own claim
// release: until it lands the reservation (the worst case) still counts,
// so the ceiling only errs on the safe side.
func (t *Tenants) Settle(r quota.Reservation, cost gw.NanoUSD) {
	if r.ID == "" {
		return
	}
	keys := t.spendKeys(r.Tenant, r.Day)
	t.c.batch.later(func(p goredis.Pipeliner) { scriptSettle.Eval(context.Background(), p, keys, r.ID, int64(cost)) })
}

// Charged is what the tenant was charged today, according to Redis; if
// Redis cannot say, what it last said.
func (t *Tenants) Charged(tenant string) gw.NanoUSD {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	charged, _, err := t.Spent(ctx, tenant)
	if err != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.known[tenant]
	}
	return charged
}

// Spent is what the tenant was charged today and has reserved now,
// according to Redis (seeding the day if it must).
func (t *Tenants) Spent(ctx context.Context, tenant string) (charged, reserved gw.NanoUSD, err error) {
	day := t.period(t.c.clock.Now())
	for range 2 {
		v, err := scriptSpent.Run(ctx, t.c.rdb, t.spendKeys(tenant, day), t.c.clock.Now().UnixMilli()).Int64Slice()
		if err = t.c.check(err); err != nil {
			return 0, 0, err
		}
		if len(v) == 2 && v[0] >= 0 {
			return gw.NanoUSD(v[0]), gw.NanoUSD(v[1]), nil
		}
		if err := t.seed(ctx, tenant, day); err != nil {
			return 0, 0, err
		}
	}
	return 0, 0, errors.New("the day's spend could not be seeded")
}
