package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/load"
	"github.com/oncegate/oncegate/internal/quota"
)

// pair is two gateways' coordinators sharing one Redis namespace.
func pair(t *testing.T, url string, ttl time.Duration) (a, b *Coordinator) {
	t.Helper()
	mk := func(owner string) *Coordinator {
		c, err := New(context.Background(), Config{URL: url, Owner: owner, LeaseTTL: ttl, Renew: ttl / 3, JoinBuffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return mk("gw-a"), mk("gw-b")
}

func arrival(id, sha string) coord.Arrival {
	return coord.Arrival{Identity: "k:" + id, SHA256: sha, RequestID: "req-" + id + "-" + sha, Deadline: time.Now().Add(time.Minute)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// One claim per identity across gateways: the second gateway relays the
// first's flight, a different body conflicts, and the claim goes with
// the flight.
func testOneClaimPerIdentityAcrossGateways(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ctx := context.Background()
	pa, err := a.Place(ctx, arrival("x", "sha1"))
	if err != nil || !pa.Owner || pa.Remote != nil || pa.Err != nil {
		t.Fatalf("first arrival: %+v %v", pa, err)
	}
	pb, err := b.Place(ctx, arrival("x", "sha1"))
	if err != nil || !pb.Owner || pb.Remote == nil || pb.Remote.Owner != "gw-a" || pb.Remote.RequestID != "req-x-sha1" {
		t.Fatalf("the same identity on another gateway: %+v %v", pb, err)
	}
	pb.Flight.Finish(nil, nil) // the relay ends
	pc, _ := b.Place(ctx, arrival("x", "sha2"))
	if !errors.Is(pc.Err, coord.ErrConflict) {
		t.Fatalf("another body: %+v", pc)
	}
	pc.Flight.Finish(nil, nil)
	pa.Flight.Finish(&coord.Head{Status: 200}, []byte("done"))
	waitFor(t, "the claim's release", func() bool {
		p, _ := b.Place(ctx, arrival("x", "sha1"))
		defer p.Flight.Finish(nil, nil)
		return p.Owner && p.Remote == nil && p.Err == nil
	})
}

// A joiner on another gateway reads the owner's output from its first
// byte, then live, to the end; it counts as a joiner of the owner's flight.
func testARemoteJoinerReadsFromTheFirstByte(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ctx := context.Background()
	pa, _ := a.Place(ctx, arrival("s", "sha"))
	f := pa.Flight
	f.SetHead(&coord.Head{Status: 200, Header: map[string][]string{"Content-Type": {"text/event-stream"}}})
	f.Write([]byte("one "))
	f.Write([]byte("two "))
	pb, _ := b.Place(ctx, arrival("s", "sha"))
	sub, err := b.Watch(ctx, "k:s", *pb.Remote, 2)
	if err != nil {
		t.Fatal(err)
	}
	h, err := sub.Head(ctx)
	if err != nil || h.Status != 200 || h.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("head %+v %v", h, err)
	}
	var got bytes.Buffer
	read := func(until string) {
		for !bytes.Contains(got.Bytes(), []byte(until)) {
			chunk, done, err := sub.Next(ctx)
			if err != nil || done {
				t.Fatalf("read %q, then %v %v", got.String(), done, err)
			}
			got.Write(chunk)
		}
	}
	read("two ")
	waitFor(t, "the remote joiner counted", func() bool { return f.Joined() == 1 && f.ClientRetries() == 2 })
	f.Finish(nil, []byte("three"))
	read("three")
	if _, done, err := sub.Next(ctx); !done || err != nil {
		t.Fatalf("after the end: %v %v", done, err)
	}
	if got.String() != "one two three" {
		t.Fatalf("read %q", got.String())
	}
	sub.Leave()
}

// When the owner stops (its process dies: here it stops listening), a
// remote joiner finds out in about a poll, not when the lease lapses.
func testARemoteJoinerLearnsTheOwnerIsGone(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 30*time.Second)
	ctx := context.Background()
	pa, _ := a.Place(ctx, arrival("g", "sha"))
	pa.Flight.SetHead(&coord.Head{Status: 200})
	pa.Flight.Write([]byte("partial"))
	pb, _ := b.Place(ctx, arrival("g", "sha"))
	sub, err := b.Watch(ctx, "k:g", *pb.Remote, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Head(ctx); err != nil {
		t.Fatal(err)
	}
	if chunk, _, err := sub.Next(ctx); err != nil || string(chunk) != "partial" {
		t.Fatalf("%q %v", chunk, err)
	}
	start := time.Now()
	_ = a.Close() // the owner is gone (its claim stays until the lease lapses)
	_, _, err = sub.Next(ctx)
	if !errors.Is(err, coord.ErrOwnerGone) || time.Since(start) > 5*time.Second {
		t.Fatalf("after the owner stopped: %v after %v", err, time.Since(start))
	}
	if _, err := b.Watch(ctx, "k:g", *pb.Remote, 0); !errors.Is(err, coord.ErrOwnerGone) {
		t.Fatalf("a new watch of a stopped owner: %v", err)
	}
	if alive, err := b.OwnerAlive(ctx, "gw-a"); err != nil || alive {
		t.Fatalf("the stopped owner is alive: %v %v", alive, err)
	}
	if alive, err := b.OwnerAlive(ctx, "gw-b"); err != nil || !alive {
		t.Fatalf("a running gateway is not alive: %v %v", alive, err)
	}
	// What its joiners were shown is kept for recovery.
	b.Saw(pb.Remote.RequestID, 7)
	b.Saw(pb.Remote.RequestID, 3)
	waitFor(t, "the joiners' evidence", func() bool {
		seen, err := b.Seen(ctx, []string{pb.Remote.RequestID, "req-none"})
		return err == nil && len(seen) == 1 && seen[pb.Remote.RequestID] == coord.Seen{Joined: 2, Emitted: 7}
	})
}

// A flight that finished before the watch reached its owner says so: the
// joiner goes to the store.
func testAWatchOfAFinishedFlightSaysGone(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ctx := context.Background()
	pa, _ := a.Place(ctx, arrival("f", "sha"))
	pb, _ := b.Place(ctx, arrival("f", "sha"))
	pa.Flight.Finish(&coord.Head{Status: 200}, []byte("x"))
	sub, err := b.Watch(ctx, "k:f", *pb.Remote, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Head(ctx); !errors.Is(err, coord.ErrOwnerGone) {
		t.Fatalf("head of a finished flight: %v", err)
	}
}

var breakerCfg = breaker.Config{FailureRatio: 0.5, MinRequests: 4, Window: 10 * time.Second, OpenFor: time.Hour, HalfOpenProbes: 1}

// A breaker opened by failures seen on one gateway is open on the other
// after a sync.
func testABreakerOpenedOnOneGatewayIsOpenOnAll(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ba, bb := a.NewBreakers(breakerCfg, []string{"primary", "fallback"}), b.NewBreakers(breakerCfg, []string{"primary", "fallback"})
	for range 4 {
		tk, ok := ba.Acquire("primary")
		if !ok {
			t.Fatal("a closed breaker refused")
		}
		ba.Done("primary", tk, breaker.Failure)
	}
	waitFor(t, "the breaker open on the other gateway", func() bool { return !bb.Allows("primary") })
	if _, ok := bb.Acquire("primary"); ok {
		t.Fatal("an open breaker admitted an attempt")
	}
	if !bb.Allows("fallback") {
		t.Fatal("another route's breaker opened")
	}
	states := map[string]breaker.State{}
	bb.States(func(r string, st breaker.State, _ int64) { states[r] = st })
	if states["primary"] != breaker.Open || states["fallback"] != breaker.Closed {
		t.Fatalf("states %v", states)
	}
}

// Half-open probes are counted fleet-wide: two gateways together admit
// half_open_probes, and the probe's success closes the breaker for both.
func testHalfOpenProbesAreFleetWide(t *testing.T, d redistest.Deployment) {
	cfg := breakerCfg
	cfg.OpenFor = 300 * time.Millisecond
	ba, bb := halfOpenPair(t, d, cfg)
	tk, ok := ba.Acquire("r")
	if !ok || !tk.Probe() {
		t.Fatalf("the first probe: %+v %v", tk, ok)
	}
	if _, ok := bb.Acquire("r"); ok {
		t.Fatal("a second probe was admitted on the other gateway (half_open_probes 1)")
	}
	ba.Done("r", tk, breaker.Success)
	if tk, ok := bb.Acquire("r"); !ok || tk.State != breaker.Closed {
		t.Fatalf("after the probe succeeded: %+v %v", tk, ok)
	}
}

// The probes' verdict is the fleet's: with three probes at ratio 0.5, one
// gateway's failed probe leaves the breaker half-open, and the other
// gateway's success closes it for both.
func testProbeVerdictsAreCountedFleetWide(t *testing.T, d redistest.Deployment) {
	cfg := breakerCfg
	cfg.OpenFor, cfg.HalfOpenProbes = 300*time.Millisecond, 3
	ba, bb := halfOpenPair(t, d, cfg)
	p1, ok1 := ba.Acquire("r")
	p2, ok2 := bb.Acquire("r")
	p3, ok3 := ba.Acquire("r")
	if !ok1 || !ok2 || !ok3 || !p1.Probe() || !p2.Probe() || !p3.Probe() {
		t.Fatalf("three probes: %v %v %v", ok1, ok2, ok3)
	}
	ba.Done("r", p1, breaker.Failure)
	if st, _ := probeState(ba); st != breaker.HalfOpen { // ba's copy is what the probe script returned
		t.Fatalf("after one failed probe of three: %v; want half-open", st)
	}
	bb.Done("r", p2, breaker.Success)
	ba.Done("r", p3, breaker.Failure) // of the half-open generation: stale now
	if tk, ok := bb.Acquire("r"); !ok || tk.State != breaker.Closed {
		t.Fatalf("after a probe succeeded: %+v %v", tk, ok)
	}
}

// Another gateway's attempts in flight keep fast failures from opening a
// breaker on their own: the fleet's in-flight count is part of the ratio.
func testAttemptsInFlightAcrossTheFleetHoldABreakerClosed(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ba, bb := a.NewBreakers(breakerCfg, []string{"r"}), b.NewBreakers(breakerCfg, []string{"r"}) // min 4, ratio 0.5
	ctx := context.Background()
	key := ba.key("r")
	var out []breaker.Ticket
	for range 10 {
		tk, ok := ba.Acquire("r")
		if !ok {
			t.Fatal("a closed breaker refused")
		}
		out = append(out, tk)
	}
	waitFor(t, "gateway a's attempts in flight reported", func() bool {
		v, _ := a.rdb.HGet(ctx, key+":inf", ba.id).Result()
		return strings.HasPrefix(v, "10:")
	})
	for range 4 {
		tk, _ := bb.Acquire("r")
		bb.Done("r", tk, breaker.Failure)
	}
	waitFor(t, "gateway b's failures counted", func() bool {
		keys, _ := keysLike(ctx, a, key, key+":w:*")
		failed := 0
		for _, k := range keys {
			n, _ := a.rdb.HGet(ctx, k, "fail").Int()
			failed += n
		}
		return failed >= 4
	})
	if st, _ := a.rdb.HGet(ctx, key, "state").Int(); st != int(breaker.Closed) {
		t.Fatalf("4 failures with 10 attempts out elsewhere opened the breaker (state %d)", st)
	}
	for _, tk := range out {
		ba.Done("r", tk, breaker.Failure)
	}
	waitFor(t, "open once the attempts in flight failed too", func() bool { return !bb.Allows("r") })
}

// probeState is a gateway's copy of its one route's state, as the last
// script it ran or the last sync left it.
func probeState(b *Breakers) (breaker.State, int64) {
	var st breaker.State
	var gen int64
	b.States(func(_ string, s breaker.State, g int64) { st, gen = s, g })
	return st, gen
}

// halfOpenPair is two gateways sharing breaker "r" under cfg, opened by
// failures one of them saw and half-open again for both.
func halfOpenPair(t *testing.T, d redistest.Deployment, cfg breaker.Config) (ba, bb *Breakers) {
	t.Helper()
	a, b := pair(t, d.URL(t), 5*time.Second)
	ba, bb = a.NewBreakers(cfg, []string{"r"}), b.NewBreakers(cfg, []string{"r"})
	for range cfg.MinRequests {
		tk, _ := ba.Acquire("r")
		ba.Done("r", tk, breaker.Failure)
	}
	waitFor(t, "open everywhere", func() bool {
		open := false
		bb.States(func(_ string, st breaker.State, gen int64) { open = st != breaker.Closed && gen > 1 })
		return open
	})
	waitFor(t, "half-open", func() bool { return bb.Allows("r") })
	return ba, bb
}

// Two gateways together take no more retries than ratio × first attempts
// + min_per_second × window.
func testTheRetryBudgetIsFleetWide(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	cfg := breaker.BudgetConfig{Ratio: 0.5, MinPerSecond: 0.2, Window: 10 * time.Second} // reserve 2
	ua, ub := a.NewBudget(cfg), b.NewBudget(cfg)
	for range 10 {
		ua.First("p")
		ua.First("other") // another provider's first attempts buy none here
	}
	for range 6 {
		ub.First("p")
	}
	// Sent late, first attempts only make the budget stricter; wait until
	// Redis has them all so that the bound is exact.
	waitFor(t, "all first attempts in Redis", func() bool {
		_ = ub.flush(context.Background())
		_ = ua.flush(context.Background())
		ua.mu.Lock()
		defer ua.mu.Unlock()
		return ua.of("p").firsts == 16
	})
	taken := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := ua
			if i%2 == 1 {
				u = ub
			}
			if u.Retry("p") {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if want := 10; taken != want { // 0.5 × 16 + 2
		t.Fatalf("%d retries taken by both gateways, want %d", taken, want)
	}
	waitFor(t, "the other gateway to see the spent budget", func() bool { return !ua.Allows("p") && !ub.Allows("p") })
	if !ub.Allows("other") {
		t.Fatal("another provider's budget was spent by these retries")
	}
}

// 64 concurrent spenders on two gateways never reserve past the ceiling;
// what settles is charged, what lapses is charged its worst case.
func testTenantCeilingAcrossGateways(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	const ceiling, reserve = gw.NanoUSD(1_000_000), gw.NanoUSD(30_000)
	limits := map[string]quota.Tenant{"acme": {CostPerDay: ceiling}}
	none := func(context.Context, int64) (map[string]int64, error) { return nil, nil }
	ta, tb := a.NewTenants(limits, none), b.NewTenants(limits, none)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn := ta
			if g%2 == 1 {
				tn = tb
			}
			for range 20 {
				if r, ok := tn.Reserve("acme", reserve, time.Now().Add(time.Minute)); ok {
					tn.Settle(r, reserve-1000)
				}
			}
		}()
	}
	wg.Wait()
	var charged, reserved gw.NanoUSD
	waitFor(t, "every settle", func() bool {
		charged, reserved, _ = ta.Spent(context.Background(), "acme")
		return reserved == 0
	})
	// Never past the ceiling; and it was reached, give or take the
	// reservations whose settles were still on their way when a spender
	// gave up.
	if charged > ceiling || charged < ceiling/2 {
		t.Fatalf("charged %d of a %d ceiling (reservations of %d)", charged, ceiling, reserve)
	}
	// A reservation whose attempt must have ended is charged its worst
	// case; its late settle charges only the difference.
	tc := a.NewTenants(map[string]quota.Tenant{"globex": {CostPerDay: ceiling}}, none)
	r, ok := tc.Reserve("globex", 5000, time.Now().Add(-time.Second))
	if !ok {
		t.Fatal("refused")
	}
	if c, res, _ := tc.Spent(context.Background(), "globex"); c != 5000 || res != 0 {
		t.Fatalf("a lapsed reservation: charged %d reserved %d", c, res)
	}
	tc.Settle(r, 3000)
	waitFor(t, "the late settle", func() bool { c, _, _ := tc.Spent(context.Background(), "globex"); return c == 3000 })
}

// A day Redis does not have is seeded from the store: no fresh budget
// after Redis restarted empty.
func testTheDaysSpendIsSeededFromTheStore(t *testing.T, d redistest.Deployment) {
	a, _ := pair(t, d.URL(t), 5*time.Second)
	calls := 0
	spend := func(_ context.Context, day int64) (map[string]int64, error) {
		calls++
		if day != gw.Day(time.Now()) {
			return nil, fmt.Errorf("asked for day %d", day)
		}
		return map[string]int64{"acme": 900}, nil
	}
	tn := a.NewTenants(map[string]quota.Tenant{"acme": {CostPerDay: 1000}}, spend)
	if _, ok := tn.Reserve("acme", 200, time.Now().Add(time.Minute)); ok {
		t.Fatal("a reservation past the store's spend was admitted")
	}
	if _, ok := tn.Reserve("acme", 100, time.Now().Add(time.Minute)); !ok {
		t.Fatal("what fits was refused")
	}
	if calls != 1 {
		t.Fatalf("the store was read %d times, want once", calls)
	}
	// The allowance this gateway decides with is the ceiling less what was
	// charged (the reservation of 100 is not charged yet): it errs towards
	// trying, and Reserve refuses.
	if a, _ := tn.Allowance("acme"); a != 100 {
		t.Fatalf("allowance %d, want 100", a)
	}
	if _, ok := tn.Reserve("acme", 1, time.Now().Add(time.Minute)); ok {
		t.Fatal("a reservation past the ceiling was admitted")
	}
}

// Tenants' request rates are shared: two gateways together admit a
// minute's worth.
func testTenantRateAcrossGateways(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	limits := map[string]quota.Tenant{"acme": {RequestsPerMinute: 10}}
	ta, tb := a.NewTenants(limits, nil), b.NewTenants(limits, nil)
	admitted := 0
	var wait time.Duration
	for i := range 30 {
		tn := ta
		if i%2 == 1 {
			tn = tb
		}
		ok, w, err := tn.Take("acme")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		} else {
			wait = w
		}
	}
	if admitted != 10 || wait <= 0 || wait > 6*time.Second {
		t.Fatalf("admitted %d of 30 (want 10), retry after %v", admitted, wait)
	}
}

// A new logical request takes a token of its tenant's rate with its
// claim; a join of it on another gateway takes none; a request the rate
// refuses holds no claim, so the next arrival of it is a new request.
func testTheRateCountsNewRequestsNotJoins(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ctx := context.Background()
	rated := func(id string) coord.Arrival {
		ar := arrival(id, "sha")
		ar.Tenant, ar.RequestsPerMinute = "acme", 2
		return ar
	}
	one, err := a.Place(ctx, rated("one"))
	if err != nil || !one.Owner || one.Err != nil || !one.RateTaken || one.Remote != nil {
		t.Fatalf("the first request: %+v %v", one, err)
	}
	joined, _ := b.Place(ctx, rated("one"))
	if joined.Remote == nil || joined.Err != nil {
		t.Fatalf("the same request on another gateway: %+v", joined)
	}
	two, _ := b.Place(ctx, rated("two"))
	if two.Err != nil || two.Remote != nil {
		t.Fatalf("the second request (the join took no token): %+v", two)
	}
	three, _ := a.Place(ctx, rated("three"))
	var limited *coord.RateLimited
	if !errors.As(three.Err, &limited) || limited.RetryAfter <= 0 || !three.RateTaken {
		t.Fatalf("the third request in a minute of 2: %+v", three)
	}
	if n, _ := a.rdb.Exists(ctx, a.key(nsClaim, "k:three")).Result(); n != 0 {
		t.Fatal("a request the rate refused holds its claim")
	}
	if _, held := a.claims.Load("k:three"); held {
		t.Fatal("the gateway counts a refused request's claim as its own")
	}
	for _, p := range []coord.Place{one, joined, two, three} {
		p.Flight.Finish(nil, nil)
	}
}

// Redis down is never a silent fallback: claims fail with ErrUnavailable,
// limits refuse, Err says why; when Redis is back, service resumes.
func TestAnOutageRefusesAndRecovers(t *testing.T) {
	srv := redistest.NewServer(t)
	c, err := New(context.Background(), Config{URL: srv.URL(), Owner: "gw", LeaseTTL: 5 * time.Second, Renew: time.Second, JoinBuffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tn := c.NewTenants(map[string]quota.Tenant{"acme": {RequestsPerMinute: 100, CostPerDay: 1000}},
		func(context.Context, int64) (map[string]int64, error) { return nil, nil })
	srv.Stop()
	p, err := c.Place(context.Background(), arrival("o", "sha"))
	if err != nil || !errors.Is(p.Err, coord.ErrUnavailable) || c.Err() == nil {
		t.Fatalf("a claim while Redis is down: %+v %v (Err %v)", p, err, c.Err())
	}
	p.Flight.Finish(nil, nil)
	if _, _, err := tn.Take("acme"); !errors.Is(err, coord.ErrUnavailable) {
		t.Fatalf("a rate while Redis is down: %v", err)
	}
	if _, ok := tn.Reserve("acme", 1, time.Now().Add(time.Minute)); ok {
		t.Fatal("a reservation while Redis is down")
	}
	srv.Start()
	waitFor(t, "recovery", func() bool { return c.Err() == nil })
	p, err = c.Place(context.Background(), arrival("o", "sha"))
	if err != nil || p.Err != nil || !p.Owner {
		t.Fatalf("after recovery: %+v %v", p, err)
	}
}

// An owner whose claim lapsed cannot renew it: the key Redis let go is
// not set again (another gateway may hold it by now). A claim Redis lost
// while this gateway's lease still runs (Redis restarted empty) is set
// again.
func testALapsedClaimIsNotRenewed(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	ctx := context.Background()
	lost, _ := a.Place(ctx, arrival("lapsed", "sha"))
	kept, _ := a.Place(ctx, arrival("kept", "sha"))
	v, _ := a.claims.Load("k:lapsed")
	v.(*claim).until.Store(time.Now().Add(-time.Second).UnixNano()) // this gateway's lease ran out
	// One key a command: in a cluster they are on different shards.
	for _, id := range []string{"k:lapsed", "k:kept"} {
		if err := a.rdb.Del(ctx, a.key(nsClaim, id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	a.renew()
	if n, _ := a.rdb.Exists(ctx, a.key(nsClaim, "k:lapsed")).Result(); n != 0 {
		t.Fatal("a lapsed claim was set again")
	}
	if _, held := a.claims.Load("k:lapsed"); held {
		t.Fatal("the gateway still counts a lapsed claim as its own")
	}
	if n, _ := a.rdb.Exists(ctx, a.key(nsClaim, "k:kept")).Result(); n != 1 {
		t.Fatal("a claim Redis lost under a live lease was not set again")
	}
	// Another gateway can claim the lapsed identity now.
	if p, _ := b.Place(ctx, arrival("lapsed", "sha")); !p.Owner || p.Remote != nil || p.Err != nil {
		t.Fatalf("the lapsed identity on another gateway: %+v", p)
	}
	lost.Flight.Finish(nil, nil)
	kept.Flight.Finish(nil, nil)
}

// Routes' load is fleet-wide: one gateway's attempts in flight and the
// rate-limit headroom its provider's headers gave are in the other's
// figures within a sync, and a gateway's attempts leave them when they
// end.
func testRoutesLoadIsSharedAcrossGateways(t *testing.T, d redistest.Deployment) {
	a, b := pair(t, d.URL(t), 5*time.Second)
	limits := map[string]load.Limits{"east": {Share: true}, "west": {Share: true}}
	ta, tb := load.New(clock.System{}, limits), load.New(clock.System{}, limits)
	a.NewLoads(ta)
	b.NewLoads(tb)
	ta.Begin("east")
	ta.Begin("east")
	tb.Begin("west")
	waitFor(t, "a's attempts in b's figures", func() bool { return tb.Figures("east").InFlight == 2 })
	waitFor(t, "b's attempt in a's figures", func() bool { return ta.Figures("west").InFlight == 1 })
	if f := tb.Figures("west"); f.InFlight != 1 {
		t.Fatalf("b counts its own attempt as %d", f.InFlight)
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "100")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "30s")
	ta.Headers("west", h)
	waitFor(t, "a's learned headroom in b's figures", func() bool { return tb.Figures("west").Headroom == 0 })
	if f := tb.Figures("east"); f.Headroom != 1 {
		t.Fatalf("east's headroom %v: only west was learned", f.Headroom)
	}
	ta.End("east", 10)
	ta.End("east", 10)
	waitFor(t, "a's ended attempts leave b's figures", func() bool { return tb.Figures("east").InFlight == 0 })
}
