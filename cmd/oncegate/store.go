package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
)

// openStore opens the ledger a configuration's `store` names, to write
// (serve) or, with readOnly, to read beside gateways that write it
// (receipts).
func openStore(ctx context.Context, store string, readOnly bool) (ledger.Store, error) {
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
	case policy.IsPostgres(store):
		if readOnly {
			return postgres.OpenReadOnly(ctx, store)
		}
		return postgres.Open(ctx, store)
	}
	return nil, fmt.Errorf("store %q: want sqlite://PATH, postgres://… or memory://", store)
}
