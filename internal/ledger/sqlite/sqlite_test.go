package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

func TestConformance(t *testing.T) {
	var path string
	ledgertest.Run(t, func(t *testing.T, reopen bool) ledger.Store {
		if !reopen {
			path = filepath.Join(t.TempDir(), "ledger.db")
		}
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
