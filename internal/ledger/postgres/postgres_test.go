package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
)

func TestConformance(t *testing.T) {
	var url string
	ledgertest.Run(t, func(t *testing.T, reopen bool) ledger.Store {
		if !reopen {
			url = pgtest.URL(t)
		}
		s, err := Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// Two gateways' batches of one tenant's requests never wait on each other
// in a circle: no batch fails (a deadlock would make PostgreSQL abort one
// after a second), and every write lands.
func TestBatchesOfTwoGatewaysNeverDeadlock(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	var stores []*Store
	for range 2 {
		s, err := Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	now := time.Now()
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for i := range 20 {
				id := fmt.Sprintf("r-%d-%d", g, i)
				rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", State: ledger.InProgress, Generation: 1,
					Owner: "o", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
				if _, _, err := s.Claim(ctx, rec, []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now}}); err != nil {
					t.Error(err)
					return
				}
				if err := s.Finish(ctx, &ledger.Finish{RequestID: id, Generation: 1, State: ledger.Succeeded, At: now, Tenant: "acme", Charge: 10,
					Events: []ledger.Event{{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvTerminal, At: now}}, Receipt: []byte(`{}`)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, s := range stores {
		if n := s.batch.failed.Load(); n != 0 {
			t.Errorf("gateway %d: %d batches failed and were sent again one by one", i, n)
		}
	}
	if spend, err := stores[0].Spend(ctx, ledger.Day(now)); err != nil || spend["acme"] != 48*20*10 {
		t.Fatalf("spend %v %v, want %d", spend, err, 48*20*10)
	}
}

func TestSyncNormalTurnsSynchronousCommitOff(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	for _, tc := range []struct {
		o    Options
		want string
	}{{Options{}, "on"}, {Options{SyncNormal: true}, "off"}} {
		st, err := OpenWith(ctx, url, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = st.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got)
		st.Close()
		if err != nil || got != tc.want {
			t.Errorf("%+v: synchronous_commit %q (%v); want %q", tc.o, got, err, tc.want)
		}
	}
}

// Replicas that start together on a new database each open the store and
// ask for the fingerprint secret at once: every one gets it, and all get
// the same. Each round is a fresh schema, the Opens and the first Secret
// calls released together.
func TestReplicasStartingTogetherShareOneSecret(t *testing.T) {
	const rounds, replicas = 6, 6
	ctx := context.Background()
	for round := range rounds {
		url := pgtest.URL(t)
		stores := make([]*Store, replicas)
		secrets := make([][]byte, replicas)
		errs := make([]error, replicas)
		opened, start := sync.WaitGroup{}, make(chan struct{})
		var done sync.WaitGroup
		for i := range replicas {
			opened.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				s, err := Open(ctx, url)
				opened.Done()
				if err != nil {
					errs[i] = err
					return
				}
				stores[i] = s
				<-start
				secrets[i], errs[i] = s.Secret(ctx)
			}()
		}
		opened.Wait()
		close(start)
		done.Wait()
		for i, s := range stores {
			if s != nil {
				s.Close()
			}
			if errs[i] != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, errs[i])
			}
			if len(secrets[i]) != 32 || string(secrets[i]) != string(secrets[0]) {
				t.Fatalf("round %d: replica %d got secret %x, replica 0 %x", round, i, secrets[i], secrets[0])
			}
		}
	}
}
