package postgres

import (
	"context"
	"testing"

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
