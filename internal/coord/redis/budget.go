package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/breaker"
)

// Budget is the fleet retry budget kept for every replica
// at once: first attempts and retries counted in Redis over the rolling
// window, a tenth of it a slot. A first attempt is counted here and sent
// with the next sync (counting it late only makes the budget stricter);
// a retry is taken in Redis, at once and atomically, so that replicas
// together never pass the bound. Safe for concurrent use.
type Budget struct {
	c       *Coordinator
	cfg     breaker.BudgetConfig
	reserve float64
	mu      sync.Mutex
	pending int64 // first attempts not sent yet
	firsts  int64 // the fleet's, as of the last answer
	retries int64
}

var _ interface {
	First()
	Allows() bool
	Retry() bool
} = (*Budget)(nil)

// scriptBudget adds first attempts to the current slot and, when asked
// (ARGV[6] = 1), takes one retry if retries + 1 ≤ ratio × firsts +
// reserve over the window. ARGV: now ms, firsts to add, window ms, ratio,
// reserve, take. Returns taken (0/1), firsts, retries.
var scriptBudget = goredis.NewScript(`
local now, window = tonumber(ARGV[1]), tonumber(ARGV[3])
local width = math.floor(window / 10)
local slot = math.floor(now / width)
local key = KEYS[1] .. slot
if tonumber(ARGV[2]) > 0 then
  redis.call('HINCRBY', key, 'f', ARGV[2])
  redis.call('PEXPIRE', key, 2 * window)
end
local f, r = 0, 0
for s = slot - 9, slot do
  local v = redis.call('HMGET', KEYS[1] .. s, 'f', 'r')
  f = f + tonumber(v[1] or '0')
  r = r + tonumber(v[2] or '0')
end
local ok = 0
if ARGV[6] == '1' and r + 1 <= tonumber(ARGV[4]) * f + tonumber(ARGV[5]) then
  redis.call('HINCRBY', key, 'r', 1)
  redis.call('PEXPIRE', key, 2 * window)
  r, ok = r + 1, 1
end
return {ok, f, r}`)

// NewBudget returns the fleet retry budget.
func (c *Coordinator) NewBudget(cfg breaker.BudgetConfig) *Budget {
	b := &Budget{c: c, cfg: cfg, reserve: cfg.MinPerSecond * cfg.Window.Seconds()}
	c.addSyncer(b)
	return b
}

// First counts a logical request's first attempt.
func (b *Budget) First() {
	b.mu.Lock()
	b.pending++
	b.mu.Unlock()
}

// Allows reports, by the last counts known here, whether a retry fits.
func (b *Budget) Allows() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.retries+1) <= b.cfg.Ratio*float64(b.firsts+b.pending)+b.reserve
}

// Retry takes one retry from the fleet's budget; false when it is spent
// or Redis cannot be reached.
func (b *Budget) Retry() bool {
	b.mu.Lock()
	pending := b.pending
	b.pending = 0
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := b.args(ctx, b.c.rdb, pending, true).Int64Slice()
	if b.c.check(err) != nil || len(v) != 3 {
		b.mu.Lock()
		b.pending += pending // send them with the next sync
		b.mu.Unlock()
		return false
	}
	b.learn(v)
	return v[0] == 1
}

// flush sends the first attempts counted here now (the sync would send
// them within syncEvery).
func (b *Budget) flush(ctx context.Context) error {
	b.mu.Lock()
	pending := b.pending
	b.pending = 0
	b.mu.Unlock()
	v, err := b.args(ctx, b.c.rdb, pending, false).Int64Slice()
	if err != nil || len(v) != 3 {
		b.mu.Lock()
		b.pending += pending
		b.mu.Unlock()
		return fmt.Errorf("flush the retry budget: %v %w", v, err)
	}
	b.learn(v)
	return nil
}

func (b *Budget) args(ctx context.Context, s goredis.Scripter, firsts int64, take bool) *goredis.Cmd {
	t := "0"
	if take {
		t = "1"
	}
	return scriptBudget.Run(ctx, s, []string{b.c.prefix + "budget:"}, b.c.clock.Now().UnixMilli(), firsts, b.cfg.Window.Milliseconds(),
		strconv.FormatFloat(b.cfg.Ratio, 'f', -1, 64), strconv.FormatFloat(b.reserve, 'f', -1, 64), t)
}

func (b *Budget) learn(v []int64) {
	b.mu.Lock()
	b.firsts, b.retries = v[1], v[2]
	b.mu.Unlock()
}

// sync queues the unsent first attempts and brings the counts back.
func (b *Budget) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	b.mu.Lock()
	pending := b.pending
	b.pending = 0
	b.mu.Unlock()
	cmd := scriptBudget.Eval(ctx, pipe, []string{b.c.prefix + "budget:"}, b.c.clock.Now().UnixMilli(), pending, b.cfg.Window.Milliseconds(),
		strconv.FormatFloat(b.cfg.Ratio, 'f', -1, 64), strconv.FormatFloat(b.reserve, 'f', -1, 64), "0")
	return func() {
		v, err := cmd.Int64Slice()
		if err != nil || len(v) != 3 {
			b.mu.Lock()
			b.pending += pending
			b.mu.Unlock()
			return
		}
		b.learn(v)
	}
}
