package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
)

// A primary switch, on a URL that lists both servers with
// target_session_attrs=read-write: while neither takes writes a write
// fails; from the first write after the standby's promotion on, writes
// land there — not after the pool wore its dead connections out one
// failed request at a time — and every write acknowledged before the
// switch is there.
func TestAPrimarySwitchIsSurvived(t *testing.T) {
	start := time.Now()
	pair := pgtest.NewPair(t)
	t.Logf("pair started in %v", time.Since(start))
	ctx := context.Background()
	s, err := Open(ctx, pair.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	write := func(id string) error {
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", State: ledger.InProgress, Generation: 1,
			Owner: "o", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		if _, _, err := s.Claim(ctx, rec, []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now}}); err != nil {
			return err
		}
		return s.Finish(ctx, &ledger.Finish{RequestID: id, Generation: 1, State: ledger.Succeeded, At: now, Tenant: "acme", Charge: 10,
			Events: []ledger.Event{{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvTerminal, At: now}}, Receipt: []byte(`{}`)})
	}
	// Writes and reads at once: the pool holds several connections to
	// the primary when it goes.
	var acked []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				id := fmt.Sprintf("before-%d-%d", g, i)
				if err := write(id); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Get(ctx, "k:"+id); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Every connection the pool holds was used a moment ago: none is old
	// enough for the pool to ping it before handing it out.
	touch(t, s, 16)
	stopped := time.Now()
	pair.StopPrimary()
	t.Logf("stopped in %v", time.Since(stopped))
	if err := write("between"); err == nil {
		t.Fatal("a write landed while no server took writes")
	}
	// The first lost connection emptied the pool (the last one closes in
	// the background): no dead one is left to fail a later request.
	for deadline := time.Now().Add(5 * time.Second); s.pool.Stat().TotalConns() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a connection was lost, %d connections to the stopped primary are still in the pool", s.pool.Stat().TotalConns())
		}
	}
	promoted := time.Now()
	pair.Promote()
	t.Logf("promoted in %v", time.Since(promoted))
	for i := range 20 {
		if err := write(fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatalf("write %d after the promotion: %v", i, err)
		}
		if _, err := s.Get(ctx, fmt.Sprintf("k:after-%d", i)); err != nil {
			t.Fatalf("read %d after the promotion: %v", i, err)
		}
	}
	for _, id := range acked {
		rec, err := s.Get(ctx, "k:"+id)
		if err != nil || rec.State != ledger.Succeeded {
			t.Fatalf("%s, acknowledged before the switch: %+v %v", id, rec, err)
		}
	}
	if spend, err := s.Spend(ctx, ledger.Day(now)); err != nil || spend["acme"] != int64(10*(len(acked)+20)) {
		t.Fatalf("spend %v %v, want %d", spend, err, 10*(len(acked)+20))
	}
}

// touch uses n of the pool's connections at once.
func touch(t *testing.T, s *Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.pool.Exec(context.Background(), `SELECT pg_sleep(0.05)`); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
