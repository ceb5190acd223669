package memory

import (
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

func TestConformance(t *testing.T) {
	var last *Store
	ledgertest.Run(t, func(t *testing.T, reopen bool) ledger.Store {
		if reopen && last != nil {
			last = last.Reopen()
		} else {
			last = New(0)
		}
		return last
	})
}

func TestHistoryIsBounded(t *testing.T) {
	s := New(3)
	ctx := t.Context()
	for i := range 5 {
		id := string(rune('a' + i))
		if _, _, err := s.Claim(ctx, &ledger.Record{Identity: "k:" + id, RequestID: id, State: ledger.InProgress, Generation: 1},
			[]ledger.Event{{RequestID: id, Seq: 1, Generation: 1, Type: ledger.EvCreated}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, &ledger.Finish{RequestID: id, Generation: 1, State: ledger.Succeeded, Tenant: "acme",
			Receipt: []byte(`{}`), Events: []ledger.Event{{RequestID: id, Seq: 2, Generation: 1, Type: ledger.EvTerminal}}}); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := s.Receipts(ctx, "acme", 10, "")
	if len(list) != 3 {
		t.Fatalf("%d receipts kept, want the last 3", len(list))
	}
	if _, err := s.Receipt(ctx, "acme", "a"); err == nil {
		t.Fatal("the oldest receipt was kept")
	}
	if evs, _ := s.Events(ctx, "a"); len(evs) != 0 {
		t.Fatal("the oldest request's events were kept")
	}
	if evs, _ := s.Events(ctx, "e"); len(evs) != 2 {
		t.Fatalf("the newest request's events: %v", evs)
	}
}
