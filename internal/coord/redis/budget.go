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

// Budget is the retry budget, per provider, kept for every replica at
// once: first attempts and retries counted in Redis over the rolling
// window, a tenth of it a slot, under a key per provider. A first attempt
// is counted here and sent with the next sync (counting it late only
// makes the budget stricter); a retry is taken in Redis, at once and
// atomically, so that replicas together never pass the bound. Safe for
// concurrent use.
type Budget struct {
	c       *Coordinator
	cfg     breaker.BudgetConfig
	reserve float64
	mu      sync.Mutex
	by      map[string]*providerBudget
}

// providerBudget is one provider's counts as this gateway knows them.
type providerBudget struct {
	pending int64 // first attempts not sent yet
	firsts  int64 // the fleet's, as of the last answer
	retries int64
}

var _ interface {
	First(string)
	Allows(string) bool
	Retry(string) bool
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
	b := &Budget{c: c, cfg: cfg, reserve: cfg.MinPerSecond * cfg.Window.Seconds(), by: map[string]*providerBudget{}}
	c.addSyncer(b)
	return b
}

// of is provider's counts; b.mu is held.
func (b *Budget) of(provider string) *providerBudget {
	pb := b.by[provider]
	if pb == nil {
		pb = &providerBudget{}
		b.by[provider] = pb
	}
	return pb
}

// First counts a logical request's first attempt on provider.
func (b *Budget) First(provider string) {
	b.mu.Lock()
	b.of(provider).pending++
	b.mu.Unlock()
}

// Allows reports, by the last counts known here, whether a retry on
// provider fits.
func (b *Budget) Allows(provider string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.of(provider)
	return float64(pb.retries+1) <= b.cfg.Ratio*float64(pb.firsts+pb.pending)+b.reserve
}

// Headroom reports, over every provider this gateway has seen, the
// retries taken over the window and how many the budgets allow.
func (b *Budget) Headroom() (taken, allowed float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pb := range b.by {
		taken += float64(pb.retries)
		allowed += b.cfg.Ratio*float64(pb.firsts+pb.pending) + b.reserve
	}
	return taken, allowed
}

// take removes provider's unsent first attempts to send them; give puts
// them back if they could not be sent.
func (b *Budget) take(provider string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := b.of(provider)
	n := pb.pending
	pb.pending = 0
	return n
}

func (b *Budget) give(provider string, n int64) {
	b.mu.Lock()
	b.of(provider).pending += n
	b.mu.Unlock()
}

// Retry takes one retry on provider from the fleet's budget; false when
// it is spent or Redis cannot be reached.
func (b *Budget) Retry(provider string) bool {
	pending := b.take(provider)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := b.args(ctx, b.c.rdb, provider, pending, true).Int64Slice()
	if b.c.check(err) != nil || len(v) != 3 {
		b.give(provider, pending) // send them with the next sync
		return false
	}
	b.learn(provider, v)
	return v[0] == 1
}

// flush sends the first attempts counted here now (the sync would send
// them within syncEvery).
func (b *Budget) flush(ctx context.Context) error {
	for _, provider := range b.providers() {
		pending := b.take(provider)
		v, err := b.args(ctx, b.c.rdb, provider, pending, false).Int64Slice()
		if err != nil || len(v) != 3 {
			b.give(provider, pending)
			return fmt.Errorf("flush the retry budget: %v %w", v, err)
		}
		b.learn(provider, v)
	}
	return nil
}

func (b *Budget) providers() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.by))
	for p := range b.by {
		out = append(out, p)
	}
	return out
}

// key starts the names of provider's window slots (the script appends
// the slot's number: one hash slot for them all in a cluster).
func (b *Budget) key(provider string) string { return b.c.key("budget:", provider) + ":" }

func (b *Budget) args(ctx context.Context, s goredis.Scripter, provider string, firsts int64, take bool) *goredis.Cmd {
	t := "0"
	if take {
		t = "1"
	}
	return scriptBudget.Run(ctx, s, []string{b.key(provider)}, b.c.clock.Now().UnixMilli(), firsts, b.cfg.Window.Milliseconds(),
		strconv.FormatFloat(b.cfg.Ratio, 'f', -1, 64), strconv.FormatFloat(b.reserve, 'f', -1, 64), t)
}

func (b *Budget) learn(provider string, v []int64) {
	b.mu.Lock()
	pb := b.of(provider)
	pb.firsts, pb.retries = v[1], v[2]
	b.mu.Unlock()
}

// sync queues every provider's unsent first attempts and brings the
// counts back.
func (b *Budget) sync(ctx context.Context, pipe goredis.Pipeliner) func() {
	var done []func()
	for _, provider := range b.providers() {
		pending := b.take(provider)
		cmd := scriptBudget.Eval(ctx, pipe, []string{b.key(provider)}, b.c.clock.Now().UnixMilli(), pending, b.cfg.Window.Milliseconds(),
			strconv.FormatFloat(b.cfg.Ratio, 'f', -1, 64), strconv.FormatFloat(b.reserve, 'f', -1, 64), "0")
		done = append(done, func() {
			v, err := cmd.Int64Slice()
			if err != nil || len(v) != 3 {
				b.give(provider, pending)
				return
			}
			b.learn(provider, v)
		})
	}
	return func() {
		for _, f := range done {
			f()
		}
	}
}
