package replica

import (
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
)

// Redis's day, seeded from PostgreSQL after Redis restarted empty,
// counts what requests still in flight reserved in the Redis that was
// lost, besides the day's charges: otherwise those requests' spend would
// come on top of a budget handed out again. (The chaos soak with three
// replicas found a tenant 20 µUSD over its ceiling without it.)
func TestSeedSpendCountsRequestsInFlight(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for _, id := range []string{"flying", "done"} {
		rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", State: ledger.InProgress, Generation: 1,
			Owner: "o", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		evs := []ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now},
			{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvReserved, At: now, Data: []byte(`{"reserve_usd":0.000080}`)}}
		if _, _, err := st.Claim(ctx, rec, evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Finish(ctx, &ledger.Finish{RequestID: "done", Generation: 1, State: ledger.Succeeded, At: now, Tenant: "acme", Charge: 63_000,
		Events: []ledger.Event{{RequestID: "done", Seq: 3, Generation: 1, Type: ledger.EvTerminal, At: now}}, Receipt: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	spend, err := seedSpend(st)(ctx, ledger.Day(now))
	if err != nil {
		t.Fatal(err)
	}
	if spend["acme"] != 63_000+80_000 {
		t.Fatalf("seeded %d nano-USD, want the charge 63000 and the reservation in flight 80000", spend["acme"])
	}
}
