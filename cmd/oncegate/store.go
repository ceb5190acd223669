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
// (serve) at the durability sync names (ledger.sync) or, with readOnly,
// to read beside gateways that write it (receipts).
func openStore(ctx context.Context, store, sync string, readOnly bool) (ledger.Store, error) {
	normal := sync == "normal"
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
		return sqlite.OpenWith(path, sqlite.Options{SyncNormal: normal})
	case policy.IsPostgres(store):
		if readOnly {
			return postgres.OpenReadOnly(ctx, store)
		}
		return postgres.OpenWith(ctx, store, postgres.Options{SyncNormal: normal})
	}
	return nil, fmt.Errorf("store %q: want sqlite://PATH, postgres://… or memory://", store)
}
