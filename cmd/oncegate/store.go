package main

import (
	"context"
	"io"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/storeopen"
)

// openStore is storeopen.Open.
func openStore(ctx context.Context, store, sync string, readOnly bool, stderr io.Writer) (ledger.Store, error) {
	return storeopen.Open(ctx, store, sync, readOnly, stderr)
}
