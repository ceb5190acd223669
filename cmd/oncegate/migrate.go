package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
)

// migrate applies the store's schema migrations and nothing else (serve
// applies them too, at start): for upgrades that migrate before the new
// gateways roll out.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("migrate", "--config FILE [--store URL]", "Apply the store's schema migrations (serve does too, at start).", "", stderr)
	path := fs.String("config", "", "configuration naming the store (required)")
	storeFlag := fs.String("store", "", "store to migrate (default: the config's store)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "oncegate migrate: --config FILE is required")
		return 2
	}
	pol, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	store := pol.Config.Store
	if *storeFlag != "" {
		store = *storeFlag
	}
	switch {
	case policy.IsPostgres(store):
		applied, version, err := postgres.Migrate(ctx, store)
		if err != nil {
			fmt.Fprintf(stderr, "oncegate migrate: %s: %v\n", postgres.Redact(store), err)
			return 1
		}
		fmt.Fprintf(stdout, "store %s: schema version %d (%d migration(s) applied now)\n", postgres.Redact(store), version, applied)
	case strings.HasPrefix(store, "sqlite://"):
		// Opening migrates; it fails while a gateway holds the file.
		st, err := sqlite.Open(strings.TrimPrefix(store, "sqlite://"))
		if err != nil {
			fmt.Fprintf(stderr, "oncegate migrate: %v\n", err)
			return 1
		}
		_ = st.Close()
		fmt.Fprintf(stdout, "store %s: schema version %d\n", store, sqlite.Version())
	default:
		fmt.Fprintf(stdout, "store %s has no schema to migrate\n", store)
	}
	return 0
}
