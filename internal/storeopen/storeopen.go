// Package storeopen opens the ledger a configuration's `store` names
// (docs/configuration.md, "store"): SQLite behind its intent log,
// PostgreSQL, or memory, to write or to read beside gateways writing it.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
)

// Open opens the ledger a configuration's `store` names, to write
// (a gateway) at the durability sync names (ledger.sync) or, with readOnly,
// to read beside gateways that write it (receipts): a SQLite reader has
// then caught up with the intent log of the gateway writing it.
// Warnings go to stderr.
func Open(ctx context.Context, store, sync string, readOnly bool, stderr io.Writer) (ledger.Store, error) {
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
			return openSQLiteReader(ctx, path, stderr)
		}
		// Claims and terminals go to an intent log first, the database
		// written behind it (docs/durability.md, "An intent log in front
		// of SQLite"; docs/performance.md has the measurements).
		st, err := sqlite.OpenLog(path, sqlite.Options{SyncNormal: normal})
		if errors.Is(err, intentlog.ErrCorruptLog) {
			return nil, fmt.Errorf("%w\nthe gateway does not start on a damaged intent log: `oncegate ledger check` describes the damage, "+
				"`oncegate ledger salvage --accept-loss` recovers what is intact (docs/durability.md)", err)
		}
		if err != nil {
			return nil, err
		}
		return st, nil
	case policy.IsPostgres(store):
		if readOnly {
			return postgres.OpenReadOnly(ctx, store)
		}
		return postgres.OpenWith(ctx, store, postgres.Options{SyncNormal: normal})
	}
	return nil, fmt.Errorf("store %q: want sqlite://PATH, postgres://… or memory://", store)
}

// openSQLiteReader opens a SQLite ledger to read, once its database has
// applied what the intent log of the gateway writing it holds: a receipt
// acknowledged before the command started is there. With no gateway
// applying the log (it stopped with records not applied), the database is
// read as it is, and a warning says what may be missing.
func openSQLiteReader(ctx context.Context, path string, stderr io.Writer) (ledger.Store, error) {
	st, err := sqlite.OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	if err := st.CatchUp(ctx); err != nil {
		if !errors.Is(err, sqlite.ErrBehind) {
			_ = st.Close()
			return nil, err
		}
		fmt.Fprintf(stderr, "oncegate: warning: %v; the gateway applies the rest when it next opens the ledger, and until then what it holds is not shown\n", err)
	}
	return st, nil
}
