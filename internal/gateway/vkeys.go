package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/vkey"
)

// Virtual keys (docs/keys.md) are issued at run time and kept in the
// store as a digest of their secret. A request's key is found by that
// digest in a cache — no store round trip in the steady state — that
// every replica empties of a key as soon as the key feed says it
// changed; expiry and a rotation's grace are checked against the clock
// on every request.

// KeyLimits are the virtual keys' own limits, by key id, beside the
// tenants' (docs/keys.md): each is a quota.Ceiling whose "tenant" is a
// key id. Nil fields are made in process.
type KeyLimits struct {
	// Day holds requests_per_minute and cost_usd_per_day.
	Day quota.Ceiling
	// Month holds cost_usd_per_month (its ceiling is per UTC month).
	Month quota.Ceiling
	// Tokens holds tokens_per_minute, reserved as tokens.
	Tokens quota.Ceiling
	// Running counts each key's requests in progress against its
	// max_concurrent (nil: counted in this process).
	Running KeyRunning
}

// KeyFeed tells the replicas which keys changed (*redis.KeyFeed).
type KeyFeed interface {
	// Changed tells every replica that key id changed.
	Changed(ctx context.Context, id string) error
	// Follow calls f with the ids of the keys that changed elsewhere, or
	// all true when it cannot tell which.
	Follow(f func(ids []string, all bool))
}

// limitSetter is limits whose per-id limits can be replaced (quota.Limits
// and the Redis ones).
type limitSetter interface {
	SetLimits(map[string]quota.Tenant)
}

// spendSeeder is limits kept in process, seeded from the store.
type spendSeeder interface {
	Seed(period int64, charged map[string]gw.NanoUSD)
}

// liveKey is a virtual key as a request uses it: the stored key (never
// changed once cached) and what it narrows.
type liveKey struct {
	k        *ledger.Key
	digest   string // the digest that matched: the current or the previous one
	models   map[string]bool
	boundary gw.DataBoundary // 0: the tenant's
	// tenant is the key's tenant narrowed by the key, made once per
	// policy tenant (a reload replaces it).
	tenant atomic.Pointer[narrowed]
}

type narrowed struct{ base, t *policy.Tenant }

// keyState is what the gateway keeps of the virtual keys.
type keyState struct {
	limits  KeyLimits
	feed    KeyFeed // nil: one gateway
	mu      sync.RWMutex
	cache   map[string]*liveKey // by digest
	missing map[string]bool     // digests the store does not know
	gen     uint64              // bumped by every change; a lookup begun before is not cached
	// limited are the keys whose limits the KeyLimits hold, by id.
	limited map[string][3]quota.Tenant // day, month, tokens
}

// maxMissing bounds the digests remembered as unknown.
const maxMissing = 10000

func (g *Gateway) initKeys(opts Options) {
	g.keys = &keyState{limits: opts.KeyLimits, feed: opts.KeyFeed, cache: map[string]*liveKey{}, missing: map[string]bool{},
		limited: map[string][3]quota.Tenant{}}
	ks := &g.keys.limits
	if ks.Day == nil {
		ks.Day = quota.New(g.clock, nil)
	}
	if ks.Month == nil {
		ks.Month = quota.NewPeriodic(g.clock, quota.Month, nil)
	}
	if ks.Tokens == nil {
		ks.Tokens = quota.NewPeriodic(g.clock, quota.Minute, nil)
	}
	if ks.Running == nil {
		ks.Running = new(localRunning)
	}
	if g.keys.feed != nil {
		g.keys.feed.Follow(g.keysChanged)
	}
}

// keysChanged drops what is cached of the keys ids (of every key, all).
func (g *Gateway) keysChanged(ids []string, all bool) {
	s := g.keys
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if all {
		clear(s.cache)
		clear(s.missing)
		return
	}
	drop := make(map[string]bool, len(ids))
	for _, id := range ids {
		drop[id] = true
	}
	for d, lk := range s.cache {
		if drop[lk.k.ID] {
			delete(s.cache, d)
		}
	}
	clear(s.missing) // an issued key's digest may have been asked for before
}

// keyChanged drops key id here and tells the other replicas.
func (g *Gateway) keyChanged(ctx context.Context, id string) {
	g.keysChanged([]string{id}, false)
	if f := g.keys.feed; f != nil {
		if err := f.Changed(ctx, id); err != nil {
			g.log.Error("could not tell the other replicas a key changed: they keep its old state until their cache is emptied", "key_id", id, "err", err)
		}
	}
}

// virtualKey finds the live key of a secret; nil when there is none, or
// it is revoked, expired or past its rotation's grace. An error says the
// store could not be asked.
func (g *Gateway) virtualKey(ctx context.Context, secret string) (*liveKey, error) {
	if !vkey.Looks(secret) {
		return nil, nil
	}
	digest := vkey.Digest(g.secret, secret)
	s := g.keys
	s.mu.RLock()
	lk, missing, gen := s.cache[digest], s.missing[digest], s.gen
	s.mu.RUnlock()
	if lk == nil && !missing {
		var err error
		if lk, err = g.loadKey(ctx, digest, gen); err != nil {
			return nil, err
		}
	}
	if lk == nil || !g.keyUsable(lk) {
		return nil, nil
	}
	return lk, nil
}

// keyUsable reports whether a key authenticates now.
func (g *Gateway) keyUsable(lk *liveKey) bool {
	now := g.clock.Now()
	k := lk.k
	switch {
	case k.Revoked():
		return false
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return false
	case lk.digest != k.Digest:
		p := k.Prev(lk.digest) // a previous secret works until its own end
		return p != nil && now.Before(p.Until)
	}
	return true
}

// loadKey reads a key from the store by digest and caches it (unless a
// change came since gen).
func (g *Gateway) loadKey(ctx context.Context, digest string, gen uint64) (*liveKey, error) {
	k, err := g.ledger.KeyByDigest(ctx, digest)
	s := g.keys
	if errors.Is(err, ledger.ErrNotFound) {
		s.mu.Lock()
		if s.gen == gen {
			if len(s.missing) >= maxMissing {
				clear(s.missing)
			}
			s.missing[digest] = true
		}
		s.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lk := newLiveKey(k, digest)
	g.limitKey(ctx, k)
	s.mu.Lock()
	if s.gen == gen {
		s.cache[digest] = lk
	}
	s.mu.Unlock()
	return lk, nil
}

func newLiveKey(k *ledger.Key, digest string) *liveKey {
	lk := &liveKey{k: k, digest: digest}
	if len(k.Spec.Models) > 0 {
		lk.models = make(map[string]bool, len(k.Spec.Models))
		for _, m := range k.Spec.Models {
			lk.models[m] = true
		}
	}
	if b, err := gw.ParseDataBoundary(k.Spec.MaxDataBoundary); err == nil {
		lk.boundary = b
	}
	return lk
}

// limitOf is a key's limits as the KeyLimits take them.
func limitOf(b ledger.KeyBudget) (day, month, tokens quota.Tenant) {
	day = quota.Tenant{RequestsPerMinute: b.RequestsPerMinute, CostPerDay: gw.NanoFromUSD(b.CostUSDPerDay)}
	month = quota.Tenant{CostPerDay: gw.NanoFromUSD(b.CostUSDPerMonth)}
	tokens = quota.Tenant{CostPerDay: gw.NanoUSD(b.TokensPerMinute)}
	return day, month, tokens
}

// limitKey gives the KeyLimits a key's limits (when they changed), and
// limits kept in process what the store says it spent today and this
// month, so that a restart hands no key a fresh budget.
func (g *Gateway) limitKey(ctx context.Context, k *ledger.Key) {
	day, month, tokens := limitOf(k.Spec.Budget)
	lim := [3]quota.Tenant{day, month, tokens}
	s := g.keys
	s.mu.Lock()
	old, known := s.limited[k.ID]
	if !known || old != lim {
		s.limited[k.ID] = lim
		for i, l := range []quota.Ceiling{s.limits.Day, s.limits.Month, s.limits.Tokens} {
			if ls, ok := l.(limitSetter); ok {
				m := make(map[string]quota.Tenant, len(s.limited))
				for id, v := range s.limited {
					m[id] = v[i]
				}
				ls.SetLimits(m)
			}
		}
	}
	s.mu.Unlock()
	if !known {
		g.seedKey(ctx, k.ID)
	}
}

// seedKey gives in-process key limits what the store says key id was
// charged today and this month (Redis seeds itself from the store).
func (g *Gateway) seedKey(ctx context.Context, id string) {
	now := g.clock.Now()
	today := gw.Day(now)
	if sd, ok := g.keys.limits.Day.(spendSeeder); ok {
		if spend, err := g.ledger.KeySpend(ctx, today, today); err == nil {
			sd.Seed(today, map[string]gw.NanoUSD{id: gw.NanoUSD(spend[id])})
		}
	}
	if sd, ok := g.keys.limits.Month.(spendSeeder); ok {
		if spend, err := g.ledger.KeySpend(ctx, ledger.MonthStart(now), today); err == nil {
			sd.Seed(quota.Month(now), map[string]gw.NanoUSD{id: gw.NanoUSD(spend[id])})
		}
	}
}

// keyTenant is the key's tenant in the policy in force, narrowed by the
// key's data boundary; nil when the policy has no such tenant.
func (g *Gateway) keyTenant(lk *liveKey) *policy.Tenant {
	base := g.policy().Tenant(lk.k.Tenant)
	if base == nil {
		return nil
	}
	if n := lk.tenant.Load(); n != nil && n.base == base {
		return n.t
	}
	t := base
	if lk.boundary != 0 && lk.boundary < base.MaxBoundary {
		c := *base
		c.MaxBoundary = lk.boundary
		t = &c
	}
	lk.tenant.Store(&narrowed{base: base, t: t})
	return t
}

// boundaryOf names whose data boundary the tenant t of request r
// carries, as a route's refusal says it: its virtual key's when the key
// narrowed its tenant's, "" for the tenant's own.
func (g *Gateway) boundaryOf(r *http.Request, t *policy.Tenant) string {
	lk := keyOf(r.Context())
	if lk == nil || lk.boundary == 0 || lk.boundary != t.MaxBoundary {
		return ""
	}
	if base := g.policy().Tenant(t.ID); base == nil || base.MaxBoundary <= lk.boundary {
		return ""
	}
	return "virtual key " + lk.k.ID + "'s"
}

// virtualTenant authenticates a virtual key's secret: its tenant, narrowed
// by the key, and the key; nil when the secret is no usable key (or the
// store cannot be asked: the refusal is logged).
func (g *Gateway) virtualTenant(ctx context.Context, secret string) (*policy.Tenant, *liveKey) {
	lk, err := g.virtualKey(ctx, secret)
	if err != nil {
		g.store.Failed(err)
		return nil, nil
	}
	if lk == nil {
		return nil, nil
	}
	t := g.keyTenant(lk)
	if t == nil {
		return nil, nil
	}
	return t, lk
}
