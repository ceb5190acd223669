package main

import (
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
)

// openStore opens the ledger a configuration's `store` names.
func openStore(store string) (ledger.Store, error) {
	switch {
	case strings.HasPrefix(store, "sqlite://"):
		path := strings.TrimPrefix(store, "sqlite://")
		if path == "" {
			return nil, fmt.Errorf("store %q names no file", store)
		}
		return sqlite.Open(path)
	case strings.HasPrefix(store, "postgres://"), strings.HasPrefix(store, "postgresql://"):
		return nil, fmt.Errorf("store %q: the PostgreSQL backend is not built yet; use sqlite://PATH", store)
	}
	return nil, fmt.Errorf("store %q: want sqlite://PATH", store)
}
