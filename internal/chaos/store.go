package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
)

// The ledger as the checker reads it after the run: SQLite or PostgreSQL,
// read-only, and a wait until the restarted gateways have settled every
// request the kills left in progress.

// readStore is what the checker reads of the ledger.
type readStore interface {
	Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error)
	ConversationTurns(ctx context.Context, tenant, conversation string) ([]*ledger.Turn, error)
	Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error)
	Events(ctx context.Context, requestID string) ([]ledger.Event, error)
	Close() error
	inProgress(ctx context.Context) (int, error)
}

// openStore opens the soak's ledger to read.
func openStore(ctx context.Context, store string) (readStore, error) {
	if path, ok := strings.CutPrefix(store, "sqlite://"); ok {
		st, err := sqlite.OpenReadOnly(path)
		if err != nil {
			return nil, err
		}
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		return &sqliteRead{Store: st, db: db}, nil
	}
	st, err := postgres.OpenReadOnly(ctx, store)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, store)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &postgresRead{Store: st, conn: conn}, nil
}

type sqliteRead struct {
	*sqlite.Store
	db *sql.DB
}

func (s *sqliteRead) inProgress(ctx context.Context) (n int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT count(*) FROM requests WHERE state = 'in_progress'`).Scan(&n)
	return n, err
}

func (s *sqliteRead) Close() error { _ = s.db.Close(); return s.Store.Close() }

type postgresRead struct {
	*postgres.Store
	conn *pgx.Conn
}

func (s *postgresRead) inProgress(ctx context.Context) (n int, err error) {
	err = s.conn.QueryRow(ctx, `SELECT count(*) FROM requests WHERE state = 'in_progress'`).Scan(&n)
	return n, err
}

func (s *postgresRead) Close() error {
	_ = s.conn.Close(context.Background())
	s.Store.Close()
	return nil
}

// settled waits until the ledger holds no request in progress.
func settled(ctx context.Context, st readStore) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := st.inProgress(ctx)
		if err != nil {
			return fmt.Errorf("read the ledger: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d requests still in progress two minutes after the last restart", n)
		}
		// Recovery runs in the gateways; no event reaches this process.
		if !pause(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}
