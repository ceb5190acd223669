package redis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
)

// runningPair is two replicas' shared counts of requests in progress, each
// replica with a clock of its own, so that one can stand still (a replica
// that died) while the other's time goes on.
func runningPair(t *testing.T, d redistest.Deployment, ttl time.Duration) (ra, rb *Running, ca, cb *clock.Fake) {
	t.Helper()
	url := d.URL(t)
	start := time.Now()
	ca, cb = clock.NewFake(start), clock.NewFake(start)
	mk := func(owner string, clk clock.Clock) *Running {
		c, err := New(context.Background(), Config{URL: url, Owner: owner, LeaseTTL: ttl, Renew: ttl / 3, JoinBuffer: 1 << 20, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c.NewRunning("keyrun:")
	}
	return mk("gw-a", ca), mk("gw-b", cb), ca, cb
}

// A name's requests in progress are counted across replicas: the limit
// holds for both together, and a release lets the next one in at once.
func testRequestsInProgressAreCountedAcrossReplicas(t *testing.T, d redistest.Deployment) {
	ra, rb, _, _ := runningPair(t, d, time.Minute)
	release, ok, err := ra.Enter("key_1", 2)
	if err != nil || !ok {
		t.Fatalf("the first request: %v %v", ok, err)
	}
	if _, ok, _ := rb.Enter("key_1", 2); !ok {
		t.Fatal("the second request of a limit of 2, on the other replica, was refused")
	}
	if _, ok, _ := ra.Enter("key_1", 2); ok {
		t.Fatal("a third request of a limit of 2 was admitted")
	}
	if _, ok, _ := rb.Enter("key_2", 1); !ok {
		t.Fatal("another name shares the count")
	}
	release()
	release() // a second release changes nothing
	if _, ok, _ := rb.Enter("key_1", 2); !ok {
		t.Fatal("after a release, a request was refused")
	}
	if _, ok, _ := ra.Enter("key_1", 2); ok {
		t.Fatal("a double release freed two places")
	}
	if ra.Held() != 0 || rb.Held() != 3 {
		t.Fatalf("held: a %d, b %d", ra.Held(), rb.Held())
	}
}

// Many concurrent arrivals on two replicas never admit more than the limit.
func testRequestsInProgressNeverPastTheLimit(t *testing.T, d redistest.Deployment) {
	ra, rb, _, _ := runningPair(t, d, time.Minute)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := ra
			if i%2 == 1 {
				r = rb
			}
			if _, ok, err := r.Enter("key_1", 5); err == nil && ok {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 5 {
		t.Fatalf("%d admitted of a limit of 5", admitted)
	}
}

// A replica that dies stops renewing its leases: they lapse a TTL after
// their last renewal, and its place is free again on the others. A
// replica alive renews its long requests' leases, which then outlast the
// first TTL.
func testLeasesLapseUnlessRenewed(t *testing.T, d redistest.Deployment) {
	const ttl = 30 * time.Second
	ra, rb, ca, cb := runningPair(t, d, ttl)
	ctx := context.Background()
	renew := func(r *Running) {
		pipe := r.c.rdb.Pipeline()
		r.sync(ctx, pipe)()
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The dead replica: a holds a lease, its clock (and renewals) stop.
	if _, ok, _ := ra.Enter("dead", 1); !ok {
		t.Fatal("refused")
	}
	cb.Advance(ttl - time.Second)
	if _, ok, _ := rb.Enter("dead", 1); ok {
		t.Fatal("a lease was dropped before its TTL")
	}
	cb.Advance(time.Second)
	if _, ok, _ := rb.Enter("dead", 1); !ok {
		t.Fatal("the lease of a replica that stopped renewing did not lapse after its TTL")
	}
	// The live replica: a holds a lease and renews it a third of a TTL on.
	if _, ok, _ := ra.Enter("long", 1); !ok {
		t.Fatal("refused")
	}
	ca.Advance(ttl / 3)
	renew(ra)
	if _, ok, _ := rb.Enter("long", 1); ok { // b's clock is a TTL past a's first lease
		t.Fatal("a renewed lease lapsed at its first TTL")
	}
	cb.Advance(ttl / 3)
	if _, ok, _ := rb.Enter("long", 1); !ok {
		t.Fatal("a lease renewed once lapsed not a TTL after its renewal")
	}
}
