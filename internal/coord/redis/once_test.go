package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
)

// First is true for one caller of a key across replicas, however many
// ask at once; another key has its own first.
func testOneReplicaIsFirst(t *testing.T, d redistest.Deployment) {
	url := d.URL(t)
	var cs []*Coordinator
	for _, owner := range []string{"gw-a", "gw-b"} {
		c, err := New(context.Background(), Config{URL: url, Owner: owner, LeaseTTL: time.Minute, Renew: 20 * time.Second, JoinBuffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	var firsts atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := cs[i%2].First(context.Background(), "budgetalert:tenant|acme|month|683|1000|0.8", time.Hour)
			if err != nil {
				t.Error(err)
			}
			if ok {
				firsts.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 {
		t.Fatalf("%d callers were first, want 1", n)
	}
	if ok, err := cs[1].First(context.Background(), "budgetalert:tenant|acme|month|683|1000|1", 0); err != nil || !ok {
		t.Fatalf("another key: %v %v, want first", ok, err)
	}
}
