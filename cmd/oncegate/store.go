package main

import (
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
)

// openStore opens the ledger a configuration's `store` names, to write
// (serve) or, with readOnly, to read beside a gateway that writes it
// (receipts).
func openStore(store string, readOnly bool) (ledger.Store, error) {
	switch {
	case store == "memory://":
		if readOnly {
			return nil, fmt.Errorf("store %q keeps nothing outside the gateway's process: there is nothing to read", store)
		}
		return memory.New(0), nil
	case strings.HasPrefix(store, "sqlite://"):
		path := strings.TrimPrefix(store, "sqlite://")
		if path == "" {
			return nil, fmt.Errorf("store %q names no file", store)
		}
		if readOnly {
			return sqlite.OpenReadOnly(path)
		}
		return sqlite.Open(path)
	case strings.HasPrefix(store, "postgres://"), strings.HasPrefix(store, "postgresql://"):
		return nil, fmt.Errorf("store %q: the PostgreSQL backend is not built yet; use sqlite://PATH", store)
	}
	return nil, fmt.Errorf("store %q: want sqlite://PATH", store)
}
