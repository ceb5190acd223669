// Package keyring is the virtual keys as requests use them (docs/keys-and-teams.md):
// found by the digest of their secret in a cache, their limits, and the
// tenant each narrows.
package keyring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/vkey"
)

// Virtual keys (docs/keys-and-teams.md) are issued at run time and kept in the
// store as a digest of their secret. A request's key is found by that
// digest in a cache — no store round trip in the steady state — that
// every replica empties of a key as soon as the key feed says it
// changed; expiry and a rotation's grace are checked against the clock
// on every request.

// Limits are the virtual keys' own limits, by key id, beside the
// tenants' (docs/keys-and-teams.md): each is a quota.Ceiling whose "tenant" is a
// key id. Nil fields are made in process.
type Limits struct {
	// Day holds requests_per_minute and cost_usd_per_day.
	Day quota.Ceiling
	// Month holds cost_usd_per_month (its ceiling is per UTC month).
	Month quota.Ceiling
	// Total holds cost_usd_total (its ceiling never resets).
	Total quota.Ceiling
	// Tokens holds tokens_per_minute, reserved as tokens.
	Tokens quota.Ceiling
	// Running counts each key's requests in progress against its
	// max_concurrent (nil: counted in this process).
	Running Running
}

// Feed tells the replicas which keys changed (*redis.KeyFeed).
type Feed interface {
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

// Key is a virtual key as a request uses it: the stored key (never
// changed once cached) and what it narrows.
type Key struct {
	// Stored is the key as the store holds it (never changed once cached).
	Stored *ledger.Key
	digest string          // the digest that matched: the current or the previous one
	models map[string]bool // nil: every model
	// Boundary narrows the tenant's data boundary (0: the tenant's).
	Boundary gw.DataBoundary
	// tenant is the key's tenant narrowed by the key, made once per
	// policy tenant (a reload replaces it).
	tenant atomic.Pointer[narrowed]
}

type narrowed struct{ base, t *policy.Tenant }

// Ring is the virtual keys a gateway knows: a cache of the stored keys
// by digest, and their limits. It is safe for concurrent use.
type Ring struct {
	// Limits are the keys' own limits (read by the request path).
	Limits  Limits
	feed    Feed // nil: one gateway
	store   Store
	clock   clock.Clock
	log     *slog.Logger
	metrics *metrics.Metrics // counts the refusals of Enter and Gate
	secret  []byte
	policy  func() *policy.Policy
	mu      sync.RWMutex
	cache   map[string]*Key // by digest
	missing map[string]bool // digests the store does not know
	gen     uint64          // bumped by every change; a lookup begun before is not cached
	// OnSeed, when not nil, is called with a key's id once its limits
	// are set and its spend seeded (the budget gauges start there). Set
	// it before the ring is used.
	OnSeed func(id string)
	// OnSpent, when not nil, is told a key's id each time an attempt
	// settled a charge under its limits; OnRefused, when one of its cost
	// limits (period "day", "month" or "total") refused a request for
	// lack of room. Set them before the ring is used.
	OnSpent   func(id string)
	OnRefused func(id, period string)
	// limited are the keys whose limits the Limits hold, by id.
	limited map[string][4]quota.Tenant // day, month, tokens, total
	// teams are the teams read from the store, by id (teams.go);
	// limiting, the live ones' tenants as last read, which a change told
	// does not drop (their limits stay until a read replaces them);
	// onTeams is told when those change.
	teams    map[string]*team
	limiting map[string]*policy.Tenant
	onTeams  func()
}

// maxMissing bounds the digests remembered as unknown.
const maxMissing = 10000

// New returns a ring reading keys from store, whose secrets' digests are
// keyed by secret, counting its refusals in m; limits' nil fields are made in process, and feed (nil:
// one gateway) tells it the keys changed elsewhere.
func New(store Store, c clock.Clock, log *slog.Logger, m *metrics.Metrics, secret []byte, policy func() *policy.Policy, limits Limits, feed Feed) *Ring {
	s := &Ring{Limits: limits, feed: feed, store: store, clock: c, log: log, metrics: m, secret: secret, policy: policy,
		cache: map[string]*Key{}, missing: map[string]bool{}, limited: map[string][4]quota.Tenant{}, teams: map[string]*team{},
		limiting: newLimiting()}
	ks := &s.Limits
	if ks.Day == nil {
		ks.Day = quota.New(c, nil)
	}
	if ks.Month == nil {
		ks.Month = quota.NewPeriodic(c, quota.Month, nil)
	}
	if ks.Total == nil {
		ks.Total = quota.NewPeriodic(c, quota.Lifetime, nil)
	}
	if ks.Tokens == nil {
		ks.Tokens = quota.NewPeriodic(c, quota.Minute, nil)
	}
	if ks.Running == nil {
		ks.Running = new(localRunning)
	}
	if feed != nil {
		feed.Follow(s.Forget)
	}
	return s
}

// Forget drops what is cached of the keys ids (of every key, all), and
// of the teams among ids (TeamChange + the team's id).
func (s *Ring) Forget(ids []string, all bool) {
	s.mu.Lock()
	s.forgetTeams(ids, all)
	s.forgetKeys(ids, all)
	s.mu.Unlock()
}

// forgetKeys drops what is cached of the keys ids (of every key, all);
// s.mu is held.
func (s *Ring) forgetKeys(ids []string, all bool) {
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
		if drop[lk.Stored.ID] {
			delete(s.cache, d)
		}
	}
	clear(s.missing) // an issued key's digest may have been asked for before
}

// Changed drops key id (or a team: TeamChange + its id) here and tells
// the other replicas.
func (s *Ring) Changed(ctx context.Context, id string) {
	s.Forget([]string{id}, false)
	if f := s.feed; f != nil {
		if err := f.Changed(ctx, id); err != nil {
			s.log.Error("could not tell the other replicas a key changed: they keep its old state until their cache is emptied", "key_id", id, "err", err)
		}
	}
}

// Lookup finds the live key of a secret; nil when there is none, or
// it is revoked, expired or past its rotation's grace. An error says the
// store could not be asked.
func (s *Ring) Lookup(ctx context.Context, secret string) (*Key, error) {
	if !vkey.Looks(secret) {
		return nil, nil
	}
	digest := vkey.Digest(s.secret, secret)
	s.mu.RLock()
	lk, missing, gen := s.cache[digest], s.missing[digest], s.gen
	s.mu.RUnlock()
	if lk == nil && !missing {
		var err error
		if lk, err = s.load(ctx, digest, gen); err != nil {
			return nil, err
		}
	}
	if lk == nil || !s.usable(lk) {
		return nil, nil
	}
	return lk, nil
}

// usable reports whether a key authenticates now.
func (s *Ring) usable(lk *Key) bool {
	now := s.clock.Now()
	k := lk.Stored
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

// load reads a key from the store by digest and caches it (unless a
// change came since gen).
func (s *Ring) load(ctx context.Context, digest string, gen uint64) (*Key, error) {
	k, err := s.store.KeyByDigest(ctx, digest)
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
	s.limit(ctx, k)
	s.mu.Lock()
	if s.gen == gen {
		s.cache[digest] = lk
	}
	s.mu.Unlock()
	return lk, nil
}

func newLiveKey(k *ledger.Key, digest string) *Key {
	lk := &Key{Stored: k, digest: digest}
	if len(k.Spec.Models) > 0 {
		lk.models = make(map[string]bool, len(k.Spec.Models))
		for _, m := range k.Spec.Models {
			lk.models[m] = true
		}
	}
	if b, err := gw.ParseDataBoundary(k.Spec.MaxDataBoundary); err == nil {
		lk.Boundary = b
	}
	return lk
}

// limitOf is a key's limits as the Limits take them.
func limitOf(b ledger.KeyBudget) [4]quota.Tenant {
	return [4]quota.Tenant{
		{RequestsPerMinute: b.RequestsPerMinute, CostPerDay: gw.NanoFromUSD(b.CostUSDPerDay)},
		{CostPerDay: gw.NanoFromUSD(b.CostUSDPerMonth)},
		{CostPerDay: gw.NanoUSD(b.TokensPerMinute)},
		{CostPerDay: gw.NanoFromUSD(b.CostUSDTotal)},
	}
}

// limit gives the Limits a key's limits (when they changed), and
// limits kept in process what the store says it spent today and this
// month, so that a restart hands no key a fresh budget.
func (s *Ring) limit(ctx context.Context, k *ledger.Key) {
	lim := limitOf(k.Spec.Budget)
	s.mu.Lock()
	known := s.setLimited(k.ID, lim)
	s.mu.Unlock()
	if !known {
		s.seed(ctx, k.ID)
	}
}

// setLimited gives the Limits id's limits (a key's, or a team's tokens
// per minute under TeamChange + its id) when they changed, and reports
// whether id had limits before; s.mu is held.
func (s *Ring) setLimited(id string, lim [4]quota.Tenant) (known bool) {
	old, known := s.limited[id]
	if known && old == lim {
		return true
	}
	s.limited[id] = lim
	for i, l := range []quota.Ceiling{s.Limits.Day, s.Limits.Month, s.Limits.Tokens, s.Limits.Total} {
		if ls, ok := l.(limitSetter); ok {
			m := make(map[string]quota.Tenant, len(s.limited))
			for id, v := range s.limited {
				m[id] = v[i]
			}
			ls.SetLimits(m)
		}
	}
	return known
}

// seed gives in-process key limits what the store says key id was
// charged today, this month and over its life (Redis seeds itself from
// the store).
func (s *Ring) seed(ctx context.Context, id string) {
	now := s.clock.Now()
	for _, p := range []struct {
		lim    quota.Ceiling
		span   ledger.Span
		period int64
	}{
		{s.Limits.Day, ledger.SpanDay, gw.Day(now)},
		{s.Limits.Month, ledger.SpanMonth, quota.Month(now)},
		{s.Limits.Total, ledger.SpanTotal, quota.Lifetime(now)},
	} {
		sd, ok := p.lim.(spendSeeder)
		if !ok {
			continue
		}
		from, to := p.span.Days(p.period)
		if spend, err := s.store.KeySpend(ctx, from, to); err == nil {
			sd.Seed(p.period, map[string]gw.NanoUSD{id: gw.NanoUSD(spend[id])})
		}
	}
	if s.OnSeed != nil {
		s.OnSeed(id)
	}
}

// Costs are key id's cost ceilings per day, month and lifetime in
// nano-USD (0: none), as the limits hold them; known is false for a
// key whose limits were never set here.
func (s *Ring) Costs(id string) (day, month, total gw.NanoUSD, known bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, known := s.limited[id]
	return l[0].CostPerDay, l[1].CostPerDay, l[3].CostPerDay, known
}

// Tenant is the key's tenant in the policy in force, else the team of
// that id, narrowed by the key's data boundary and with the key's
// drop_params when it has one; nil when there is no such tenant, or the
// team is deleted. An error says the store could not be asked.
func (s *Ring) Tenant(ctx context.Context, lk *Key) (*policy.Tenant, error) {
	base := s.policy().Tenant(lk.Stored.Tenant)
	if base == nil {
		tm, err := s.team(ctx, lk.Stored.Tenant)
		if err != nil {
			return nil, err
		}
		if base = tm.tenant; base == nil {
			return nil, nil
		}
	}
	return s.narrow(lk, base), nil
}

// narrow is base narrowed by key lk, made once per base.
func (s *Ring) narrow(lk *Key, base *policy.Tenant) *policy.Tenant {
	if n := lk.tenant.Load(); n != nil && n.base == base {
		return n.t
	}
	t := base
	if lk.Boundary != 0 && lk.Boundary < base.MaxBoundary || lk.Stored.Spec.DropParams != nil {
		c := *base
		if lk.Boundary != 0 && lk.Boundary < base.MaxBoundary {
			c.MaxBoundary = lk.Boundary
		}
		if d := lk.Stored.Spec.DropParams; d != nil {
			c.DropParams = d
		}
		t = &c
	}
	lk.tenant.Store(&narrowed{base: base, t: t})
	return t
}

// Running counts each virtual key's requests in progress against its
// max_concurrent (docs/keys-and-teams.md). In one process it is a counter per key;
// *redis.Running shares it across replicas. Implementations are safe for
// concurrent use.
type Running interface {
	// Enter admits one more request of key id when fewer than limit are
	// in progress, until release is called; ok false refuses it. An
	// error says the count could not be consulted (coordination down).
	Enter(id string, limit int) (release func(), ok bool, err error)
}

// localRunning counts the requests in progress of each key in this
// process. The zero value is ready to use.
type localRunning struct{ m sync.Map } // key id → *atomic.Int64

// Enter admits a request of key id if fewer than limit are in progress.
func (l *localRunning) Enter(id string, limit int) (func(), bool, error) {
	v, ok := l.m.Load(id)
	if !ok {
		v, _ = l.m.LoadOrStore(id, new(atomic.Int64))
	}
	n := v.(*atomic.Int64)
	if running := n.Add(1); running > int64(limit) {
		n.Add(-1)
		return nil, false, nil
	}
	return func() { n.Add(-1) }, true, nil
}

var _ Running = (*localRunning)(nil)

// Store is the part of the ledger the ring reads (ledger.Store has it).
type Store interface {
	KeyByDigest(ctx context.Context, digest string) (*ledger.Key, error)
	Tenant(ctx context.Context, id string) (*ledger.Tenant, error)
	KeySpend(ctx context.Context, from, to int64) (map[string]int64, error)
}

// Allows reports whether the key may use model alias.
func (lk *Key) Allows(alias string) bool { return lk.models == nil || lk.models[alias] }

// Enter counts a request of key lk in progress until release is
// called, or refuses it when the key already has its max_concurrent in
// progress — on every replica sharing the coordination, else on this
// gateway.
func (s *Ring) Enter(lk *Key) (release func(), _ *api.Error) {
	id, limit := lk.Stored.ID, lk.Stored.Spec.Budget.MaxConcurrent
	if limit <= 0 {
		return func() {}, nil
	}
	release, ok, err := s.Limits.Running.Enter(id, limit)
	if err != nil {
		return nil, coordinationDown()
	}
	if !ok {
		s.metrics.ObserveTenantRejection(lk.Stored.Tenant, api.CodeKeyConcurrency)
		e := api.Errorf(api.CodeKeyConcurrency, "key %s has %d requests in progress, its max_concurrent", id, limit)
		e.RetryAfter = 1
		return nil, e
	}
	return release, nil
}

// coordinationDown is the refusal of a request whose limits could not be
// consulted because Redis is unreachable.
func coordinationDown() *api.Error {
	e := api.Errorf(api.CodeCoordinationUnavailable, "the gateway's shared coordination (Redis) is unreachable; nothing was sent, retry shortly")
	e.RetryAfter = 1
	return e
}

// Allows reports whether key lk may use model alias: its own models
// and, if its tenant is a team, the team's.
func (s *Ring) Allows(lk *Key, alias string) bool {
	return lk.Allows(alias) && s.teamAllows(lk, alias) == nil
}

// Gate checks a request of key lk for model alias before anything of
// it is placed: the model allow-list (403 model_not_allowed) and the
// key's request rate (429 key_rate_limited). Every endpoint a key may
// call passes it.
func (s *Ring) Gate(lk *Key, alias string) *api.Error {
	k := lk.Stored
	if !lk.Allows(alias) {
		return &api.Error{Code: api.CodeModelNotAllowed, Param: "model",
			Message: fmt.Sprintf("key %s may not use model `%s` (its models: %v)", k.ID, alias, k.Spec.Models)}
	}
	if e := s.teamAllows(lk, alias); e != nil {
		return e
	}
	ok, wait, err := s.Limits.Day.Take(k.ID)
	if err != nil {
		return coordinationDown()
	}
	if !ok {
		s.metrics.ObserveTenantRejection(k.Tenant, api.CodeKeyRateLimited)
		e := api.Errorf(api.CodeKeyRateLimited, "key %s is over its %d requests per minute", k.ID, k.Spec.Budget.RequestsPerMinute)
		e.RetryAfter = int(math.Ceil(max(1, wait.Seconds())))
		return e
	}
	return nil
}
