package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/coord"
)

// claim is a claim this gateway holds: its key and value, and when it
// lapses unless renewed (this gateway's view).
type claim struct {
	key, value string
	until      atomic.Int64 // Unix ns
}

func newClaim(key, value string, until time.Time) *claim {
	c := &claim{key: key, value: value}
	c.until.Store(until.UnixNano())
	return c
}

// claimValue is what a claim key holds: who owns the logical request,
// which it is, its body's digest and its deadline.
type claimValue struct {
	Owner     string `json:"o"`
	RequestID string `json:"r"`
	SHA256    string `json:"s"`
	Deadline  int64  `json:"d"` // Unix milliseconds
}

// scriptClaim sets a claim unless one exists — first taking a token of
// the tenant's rate (KEYS[2], when ARGV[3], the requests per minute, is
// not 0): a new logical request counts against the rate, a join does
// not. ARGV: value, TTL ms, rpm, now ms. Returns {0} when it claimed, {1,
// value} when a claim exists, {2, ms} when the rate refused. In a cluster
// the claim and the tenant's bucket are on different shards: it is run
// with the claim alone and rpm 0, and the token is taken after (claim).
var scriptClaim = goredis.NewScript(rateLib + `
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
if ARGV[3] ~= '0' then
  local ok, wait = take(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[3]))
  if ok == 0 then return {2, wait} end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {0}`)

// scriptRelease deletes a claim if it is still the one given.
var scriptRelease = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// scriptRenew extends a claim that is still the one given (1); sets it
// again if it is missing and ARGV[3] allows (2: Redis lost it, and this
// gateway's lease has not lapsed); otherwise 0: another holds it, or it
// lapsed.
var scriptRenew = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not v and ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0`)

// Place puts an arrival: a join of the flight in flight in this process;
// else the claim of its identity in Redis, which makes this gateway the
// owner; else, when another gateway holds the claim, a local flight that
// relays that gateway's output (Place.Remote). A claim held with another
// body is coord.ErrConflict on the place; Redis unreachable,
// coord.ErrUnavailable (the caller may still answer from the store).
func (c *Coordinator) Place(ctx context.Context, a coord.Arrival) (coord.Place, error) {
	f, owner, work, err := c.local.Acquire(a.Identity, a.SHA256, a.RequestID, a.Deadline)
	if err != nil || !owner {
		return coord.Place{Flight: f, Work: work}, err
	}
	p := coord.Place{Flight: f, Owner: true, Work: work}
	key := c.key(nsClaim, a.Identity)
	v, _ := json.Marshal(claimValue{Owner: c.cfg.Owner, RequestID: a.RequestID, SHA256: a.SHA256, Deadline: a.Deadline.UnixMilli()})
	now := c.clock.Now()
	keys, rpm := []string{key, c.rateKey(tenantNS, a.Tenant)}, a.RequestsPerMinute
	if c.clustered() {
		keys, rpm = keys[:1], 0
	}
	res, err := scriptClaim.Run(ctx, c.rdb, keys, string(v), c.cfg.LeaseTTL.Milliseconds(), rpm, now.UnixMilli()).Slice()
	if err = c.check(err); err != nil || len(res) == 0 {
		p.Err = err
		if err == nil {
			p.Err = fmt.Errorf("%w: the claim script answered %v", coord.ErrUnavailable, res)
		}
		return p, nil
	}
	switch kind, _ := res[0].(int64); kind {
	case 0:
		cl := newClaim(key, string(v), now.Add(c.cfg.LeaseTTL))
		p.RateTaken = true
		if c.clustered() && a.RequestsPerMinute != 0 {
			if p.Err = c.takeAfterClaim(ctx, a, now); p.Err != nil {
				c.unclaim(ctx, cl)
				return p, nil
			}
		}
		c.claims.Store(a.Identity, cl)
		f.SetOnFinish(func() { c.release(a.Identity, cl) })
		return p, nil
	case 2:
		wait, _ := res[1].(int64)
		p.Err, p.RateTaken = &coord.RateLimited{RetryAfter: time.Duration(wait) * time.Millisecond}, true
		return p, nil
	}
	existing, _ := res[1].(string)
	var held claimValue
	if json.Unmarshal([]byte(existing), &held) != nil {
		return p, nil // not a claim of ours to read: the store decides
	}
	switch {
	case held.Owner == c.cfg.Owner:
		// Our own: its flight here has finished and its release is on its
		// way. The store has its answer (a replay takes no token; a new
		// request claimed anew is counted by the caller).
	case held.SHA256 != a.SHA256:
		p.Err = coord.ErrConflict
	default:
		p.Remote = &coord.Remote{Owner: held.Owner, RequestID: held.RequestID, Deadline: time.UnixMilli(held.Deadline)}
	}
	return p, nil
}

// release lets a claim go once its flight finished (in the background:
// nobody waits for it; a claim not released lapses anyway).
func (c *Coordinator) release(identity string, cl *claim) {
	c.claims.CompareAndDelete(identity, cl)
	c.batch.add(func(p goredis.Pipeliner) { scriptRelease.Eval(context.Background(), p, []string{cl.key}, cl.value) })
}

// takeAfterClaim takes a token of the tenant's rate for a request just
// claimed, in a cluster (scriptClaim): nil if it was taken.
func (c *Coordinator) takeAfterClaim(ctx context.Context, a coord.Arrival, now time.Time) error {
	v, err := scriptRate.Run(ctx, c.rdb, []string{c.rateKey(tenantNS, a.Tenant)}, now.UnixMilli(), a.RequestsPerMinute).Int64Slice()
	if err = c.check(err); err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("%w: the rate script answered %v", coord.ErrUnavailable, v)
	}
	if v[0] == 0 {
		return &coord.RateLimited{RetryAfter: time.Duration(v[1]) * time.Millisecond}
	}
	return nil
}

// unclaim lets a claim go at once: its request was refused (the claim
// then lasted one round trip; an arrival that met it meanwhile joined a
// refused request of the same tenant, and gets the same refusal). If
// Redis does not answer, the claim lapses with its TTL.
func (c *Coordinator) unclaim(ctx context.Context, cl *claim) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
	defer cancel()
	c.check(scriptRelease.Run(ctx, c.rdb, []string{cl.key}, cl.value).Err())
}

// renewClaims renews every claim this gateway holds, every Renew, in one
// pipeline.
func (c *Coordinator) renewClaims() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Renew)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.renew()
		}
	}
}

func (c *Coordinator) renew() {
	type held struct {
		identity string
		cl       *claim
		cmd      *goredis.Cmd
	}
	var all []held
	now := c.clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Renew)
	defer cancel()
	pipe := c.rdb.Pipeline()
	c.claims.Range(func(k, v any) bool {
		cl := v.(*claim)
		reassert := "0"
		if cl.until.Load() > now.UnixNano() {
			reassert = "1"
		}
		all = append(all, held{k.(string), cl, scriptRenew.Eval(ctx, pipe, []string{cl.key}, cl.value, c.cfg.LeaseTTL.Milliseconds(), reassert)})
		return true
	})
	if len(all) == 0 {
		return
	}
	if _, err := pipe.Exec(ctx); err != nil && !isReply(err) {
		c.check(err)
		return
	}
	c.check(nil)
	for _, h := range all {
		if n, err := h.cmd.Int(); err == nil && n > 0 {
			h.cl.until.Store(now.Add(c.cfg.LeaseTTL).UnixNano())
		} else if err == nil {
			c.claims.CompareAndDelete(h.identity, h.cl) // another holds it, or it lapsed: the store's lease decides
		}
	}
}

// watchMsg asks an owner to copy a flight's output for a joiner on
// another gateway (op "watch"), or says that joiner left ("leave").
type watchMsg struct {
	Op        string `json:"op"`
	Identity  string `json:"id"`
	RequestID string `json:"r"`
	Retries   int    `json:"n,omitempty"`
}

// listen receives the watch and leave messages other gateways send this
// one about its flights. go-redis subscribes again when its connection
// broke; a subscription Redis dropped without breaking it is found by
// asking, every listenCheckEvery, whether this gateway still listens on
// the server other replicas ask: a Sentinel failover leaves it on the old
// master (a replica now), a cluster that moves the channel's slot to
// another shard unsubscribes it. Then it subscribes again.
func (c *Coordinator) listen(ps *goredis.PubSub) {
	defer c.wg.Done()
	defer func() { _ = ps.Close() }()
	ch := ps.ChannelWithSubscriptions()
	tick := time.NewTicker(listenCheckEvery)
	defer tick.Stop()
	for {
		var m any
		select {
		case <-c.stop:
			return
		case <-tick.C:
			if c.listening() {
				continue
			}
		case m = <-ch:
		}
		switch m := m.(type) {
		case *goredis.Message:
			var w watchMsg
			if json.Unmarshal([]byte(m.Payload), &w) != nil {
				continue
			}
			switch w.Op {
			case "watch":
				c.forward(w)
			case "leave":
				c.unwatch(w.RequestID)
			}
			continue
		case *goredis.Subscription:
			if m.Kind != "sunsubscribe" && m.Kind != "unsubscribe" {
				continue
			}
		}
		_ = ps.Close()
		if ps = c.resubscribe(); ps == nil {
			return
		}
		ch = ps.ChannelWithSubscriptions()
	}
}

// listenCheckEvery is how often a gateway makes sure it still listens on
// its channel: well within the half second a joiner's gateway gives an
// owner seen gone to come back.
const listenCheckEvery = 250 * time.Millisecond

// listening reports whether Redis counts this gateway as listening on its
// channel, or cannot say (it is down: go-redis subscribes again when it
// is back). It is no verdict on Redis's availability: the node it asks
// may answer while the deployment cannot serve (a cluster that lost
// another shard).
func (c *Coordinator) listening() bool {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	n, err := c.listeners(ctx, c.cfg.Owner)
	return err != nil || n > 0
}

// resubscribe subscribes to this gateway's channel again, on the node
// that serves it now, trying every resubscribeEvery until it can; nil
// once the coordinator stops.
func (c *Coordinator) resubscribe() *goredis.PubSub {
	t := time.NewTicker(resubscribeEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		if cl, ok := c.rdb.(*goredis.ClusterClient); ok {
			cl.ReloadState(ctx)
		}
		ps, err := c.subscribe(ctx)
		cancel()
		if err == nil {
			c.log.Info("coordination: subscribed again to this gateway's channel, which Redis had dropped (a failover, or a cluster moved its slot)")
			return ps
		}
		select {
		case <-c.stop:
			return nil
		case <-t.C:
		}
	}
}

// resubscribeEvery is how often a gateway whose channel Redis dropped
// tries to subscribe again.
const resubscribeEvery = 100 * time.Millisecond

// forwarder copies one flight's output into its Redis stream, from its
// first byte, for the joiners other gateways have on it.
type forwarder struct {
	f        *coord.Flight
	key      string
	watchers int // remote joiners still reading (under Coordinator.fwdMu)
}

// Stream entries: a field "k" says what the entry is, "d" holds its data.
const (
	entryHead      = "h" // d: the head, JSON
	entryBody      = "b" // d: output bytes
	entryEnd       = "e" // the output is complete
	entryAbandoned = "u" // the output ended without an outcome on record
	entryTruncated = "t" // the flight is past its join buffer: it cannot be joined
	entryGone      = "g" // the flight is not in flight here (finished, or never was)
)

// outputTTL is how long a flight's stream outlives its end, for joiners
// that are still reading it.
const outputTTL = time.Minute

// outputMaxEntries bounds a flight's stream. A flight stops taking new
// joiners once its output passes the join buffer (8 MiB by default), so
// this only bounds what a runaway stream keeps for those reading it.
const outputMaxEntries = 100_000

// forward starts copying a flight's output for a remote joiner, or
// answers why it cannot.
func (c *Coordinator) forward(w watchMsg) {
	key := c.outputKey(c.cfg.Owner, w.RequestID)
	f, err := c.local.Join(w.Identity, w.RequestID)
	if err != nil {
		kind := entryGone
		if errors.Is(err, coord.ErrTruncated) {
			kind = entryTruncated
		}
		c.xadd(key, kind, nil, true)
		return
	}
	f.NoteClientRetry(w.Retries)
	c.fwdMu.Lock()
	if fw := c.forwards[w.RequestID]; fw != nil {
		fw.watchers++
		c.fwdMu.Unlock()
		return
	}
	fw := &forwarder{f: f, key: key, watchers: 1}
	c.forwards[w.RequestID] = fw
	c.fwdMu.Unlock()
	go c.copyOut(w.RequestID, fw)
}

// unwatch ends one remote joiner's subscription.
func (c *Coordinator) unwatch(requestID string) {
	c.fwdMu.Lock()
	fw := c.forwards[requestID]
	if fw == nil || fw.watchers == 0 {
		c.fwdMu.Unlock()
		return
	}
	fw.watchers--
	c.fwdMu.Unlock()
	fw.f.Leave()
}

func (c *Coordinator) copyOut(requestID string, fw *forwarder) {
	defer func() {
		c.fwdMu.Lock()
		delete(c.forwards, requestID)
		n := fw.watchers
		fw.watchers = 0
		c.fwdMu.Unlock()
		for range n {
			fw.f.Leave()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rd := fw.f.NewReader()
	h, err := rd.Head(ctx)
	if err != nil {
		return
	}
	head, _ := json.Marshal(h)
	c.xadd(fw.key, entryHead, head, false)
	for {
		b, done, err := rd.Next(ctx)
		switch {
		case err != nil:
			return
		case done && fw.f.Abandoned():
			c.xadd(fw.key, entryAbandoned, nil, true)
			return
		case done:
			c.xadd(fw.key, entryEnd, nil, true)
			return
		}
		c.xadd(fw.key, entryBody, b, false)
	}
}

// xadd appends an entry to a flight's stream, in the background; end
// sets the stream to expire outputTTL later, anything else an hour later
// (a flight outlives neither).
func (c *Coordinator) xadd(key, kind string, data []byte, end bool) {
	ttl := time.Hour
	if end {
		ttl = outputTTL
	}
	values := []any{"k", kind}
	if data != nil {
		values = append(values, "d", data)
	}
	c.batch.add(func(p goredis.Pipeliner) {
		p.XAdd(context.Background(), &goredis.XAddArgs{Stream: key, Values: values, MaxLen: outputMaxEntries, Approx: true})
		p.Expire(context.Background(), key, ttl)
	})
}

// Watch subscribes to a flight another gateway owns: it asks the owner to
// copy its output into the flight's stream and reads that stream from the
// start. The subscription fails with coord.ErrOwnerGone when the owner is
// not there to copy it (it stopped, or the flight finished before the
// request reached it: the store has the answer), coord.ErrTruncated past
// the join buffer, coord.ErrUnavailable while Redis cannot be reached.
func (c *Coordinator) Watch(ctx context.Context, identity string, r coord.Remote, clientRetries int) (coord.Subscription, error) {
	msg, _ := json.Marshal(watchMsg{Op: "watch", Identity: identity, RequestID: r.RequestID, Retries: clientRetries})
	rd := &remote{c: c, identity: identity, r: r, key: c.outputKey(r.Owner, r.RequestID), group: c.readGroup(r.Owner), last: "0",
		signal: make(chan struct{}, 1)}
	c.hub.add(rd) // before the owner can write: nothing is missed
	n, err := c.publish(ctx, c.rdb, r.Owner, msg).Result()
	if err == nil && n == 0 {
		err = coord.ErrOwnerGone // nobody listens for that owner: it is not running
	} else if err != nil {
		err = c.check(err)
	}
	if err != nil {
		c.hub.remove(rd)
		return nil, err
	}
	return rd, nil
}

// remote reads a flight's output from its stream, as the hub delivers
// it: a Subscription to a flight another gateway owns.
type remote struct {
	c        *Coordinator
	identity string
	r        coord.Remote
	key      string
	group    string // of the streams the hub reads together (readGroup)
	last     string // the last entry the hub read (under hub.mu)
	mu       sync.Mutex
	pending  []goredis.XMessage
	signal   chan struct{}
	left     bool
}

// deliver hands the reader entries the hub read.
func (r *remote) deliver(ms []goredis.XMessage) {
	r.mu.Lock()
	r.pending = append(r.pending, ms...)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// pollEvery is how long a remote reader waits for an entry before it
// checks that the owner still holds the claim.
const pollEvery = time.Second

// next returns the next entry of the stream, waiting for it.
func (r *remote) next(ctx context.Context) (goredis.XMessage, error) {
	for {
		r.mu.Lock()
		if len(r.pending) > 0 {
			m := r.pending[0]
			r.pending = r.pending[1:]
			r.mu.Unlock()
			return m, nil
		}
		r.mu.Unlock()
		t := time.NewTimer(pollEvery)
		select {
		case <-r.signal:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return goredis.XMessage{}, ctx.Err()
		case <-t.C:
			if !r.ownerHolds(ctx) {
				return goredis.XMessage{}, coord.ErrOwnerGone
			}
		}
	}
}

// ownerHolds reports whether the owner still holds the claim on the
// request and still listens: a claim gone or changed means the flight
// ended (the store has the answer) or its owner's lease lapsed; an owner
// not subscribed any more has stopped (or lost Redis: either way it can
// copy nothing more).
func (r *remote) ownerHolds(ctx context.Context) bool {
	v, err := r.c.rdb.Get(ctx, r.c.key(nsClaim, r.identity)).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		r.c.check(err)
		return false
	}
	var held claimValue
	if json.Unmarshal([]byte(v), &held) != nil || held.RequestID != r.r.RequestID || held.Owner != r.r.Owner {
		return false
	}
	n, err := r.c.listeners(ctx, r.r.Owner)
	if err != nil {
		r.c.check(err)
		return false
	}
	return n > 0
}

func entry(m goredis.XMessage) (kind string, data []byte) {
	k, _ := m.Values["k"].(string)
	d, _ := m.Values["d"].(string)
	return k, []byte(d)
}

// Head waits for the head.
func (r *remote) Head(ctx context.Context) (*coord.Head, error) {
	for {
		m, err := r.next(ctx)
		if err != nil {
			return nil, err
		}
		kind, data := entry(m)
		switch kind {
		case entryHead:
			var h coord.Head
			if err := json.Unmarshal(data, &h); err != nil {
				return nil, coord.ErrOwnerGone
			}
			if h.Header == nil {
				h.Header = http.Header{}
			}
			return &h, nil
		case entryTruncated:
			return nil, coord.ErrTruncated
		case entryAbandoned:
			return nil, coord.ErrAbandoned
		case entryGone, entryEnd:
			return nil, coord.ErrOwnerGone
		}
	}
}

// Next returns output bytes, done at the end.
func (r *remote) Next(ctx context.Context) ([]byte, bool, error) {
	for {
		m, err := r.next(ctx)
		if err != nil {
			return nil, false, err
		}
		kind, data := entry(m)
		switch kind {
		case entryBody:
			return data, false, nil
		case entryEnd:
			return nil, true, nil
		case entryAbandoned:
			return nil, false, coord.ErrAbandoned
		case entryGone, entryTruncated:
			return nil, false, coord.ErrOwnerGone
		}
	}
}

// Leave tells the owner this joiner left (its flight's work goes on for
// the others; it ends only when no subscriber remains).
func (r *remote) Leave() {
	if r.left {
		return
	}
	r.left = true
	r.c.hub.remove(r)
	msg, _ := json.Marshal(watchMsg{Op: "leave", Identity: r.identity, RequestID: r.r.RequestID})
	r.c.batch.add(func(p goredis.Pipeliner) { r.c.publish(context.Background(), p, r.r.Owner, msg) })
}

// Len is how many flights are in flight in this gateway.
func (c *Coordinator) Len() int { return c.local.Len() }

// String names the coordinator for logs.
func (c *Coordinator) String() string {
	return "redis " + Redact(c.cfg.URL) + " as " + c.cfg.Owner + " (lease " + strconv.FormatInt(c.cfg.LeaseTTL.Milliseconds(), 10) + " ms)"
}

// OwnerAlive reports whether a gateway is running: it still listens on its
// channel. A process that died lost its connection, and Redis its
// subscription, at once; one that lost Redis for a moment subscribes
// again as soon as it is back.
func (c *Coordinator) OwnerAlive(ctx context.Context, owner string) (bool, error) {
	n, err := c.listeners(ctx, owner)
	if err = c.check(err); err != nil {
		return false, err
	}
	return n > 0, nil
}

// seenTTL is how long joiners' evidence is kept for recovery to find.
const seenTTL = 48 * time.Hour

// scriptSaw adds one joiner's evidence: KEYS[1] the request's hash, ARGV
// the visible events it was relayed.
var scriptSaw = goredis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'j', 1)
if tonumber(redis.call('HGET', KEYS[1], 't') or '0') < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 't', ARGV[1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

// Saw records, in the background, that a client here was relayed emitted
// visible events of a request whose owner stopped before its end.
func (c *Coordinator) Saw(requestID string, emitted int64) {
	key := c.key(nsSeen, requestID)
	c.batch.add(func(p goredis.Pipeliner) {
		scriptSaw.Eval(context.Background(), p, []string{key}, emitted, seenTTL.Milliseconds())
	})
}

// Seen returns the joiners' evidence on requests (those with none are
// absent).
func (c *Coordinator) Seen(ctx context.Context, requestIDs []string) (map[string]coord.Seen, error) {
	if len(requestIDs) == 0 {
		return nil, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(requestIDs))
	for i, id := range requestIDs {
		cmds[i] = pipe.HGetAll(ctx, c.key(nsSeen, id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, c.check(err)
	}
	out := map[string]coord.Seen{}
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) == 0 {
			continue
		}
		j, _ := strconv.Atoi(v["j"])
		t, _ := strconv.ParseInt(v["t"], 10, 64)
		out[requestIDs[i]] = coord.Seen{Joined: j, Emitted: t}
	}
	return out, nil
}
