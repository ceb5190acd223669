// Package postgres is the ledger backend that several gateway replicas
// share (docs/replicas.md): the same records, fencing generations, event log,
// receipts and tenant spend as the SQLite backend, in PostgreSQL through
// a pgx connection pool. Every write is one statement — its conditions
// (the generation fence, "only if the claim was created") in the
// statement itself — so a request's commit is one round trip, and
// PostgreSQL's own group commit shares an fsync among the backends that
// commit together. Row locks order a write against a concurrent takeover
// exactly as SQLite's single writer does.
package postgres

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Store is the PostgreSQL ledger. It is safe for concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	batch *batcher // nil: read-only
	loss  *lossWatch
}

var _ ledger.Store = (*Store)(nil)

// defaultMaxConns is the pool size unless the URL sets pool_max_conns:
// enough for the commits that wait on the database at once under load.
const defaultMaxConns = 32

// Open connects to the database a postgres:// URL names (pgx's syntax:
// any libpq parameter, and pool_max_conns) and applies the migrations it
// lacks.
func Open(ctx context.Context, url string) (*Store, error) { return OpenWith(ctx, url, Options{}) }

// Options choose how the store commits.
type Options struct {
	// SyncNormal commits with synchronous_commit=off: the server
	// acknowledges a commit before its WAL is flushed. It survives any
	// crash of the gateway, and of the server's processes; an operating
	// system crash or power loss of the database host may lose the last
	// commits (up to three times wal_writer_delay), never consistency.
	// The zero value leaves synchronous_commit as the server sets it.
	SyncNormal bool
}

// OpenWith is Open with the commits o chooses.
func OpenWith(ctx context.Context, url string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if o.SyncNormal {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	if !hasParam(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	loss := watchLosses(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", Redact(url), err)
	}
	loss.attach(pool)
	if _, err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate ledger %s: %w", Redact(url), err)
	}
	return &Store{pool: pool, batch: newBatcher(pool), loss: loss}, nil
}

// OpenReadOnly connects to read (`oncegate receipts`): it applies no
// migration, and fails unless the database is at this binary's schema.
func OpenReadOnly(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	loss := watchLosses(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	loss.attach(pool)
	v, err := schemaVersion(ctx, pool)
	if err == nil && v != Version() {
		err = fmt.Errorf("the database's schema is version %d, this binary's %d (run oncegate migrate)", v, Version())
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open ledger %s: %w", Redact(url), err)
	}
	return &Store{pool: pool, loss: loss}, nil
}

// Migrate applies the migrations the database lacks and reports how many
// it applied and the version it is at: `oncegate migrate`.
func Migrate(ctx context.Context, url string) (applied, version int, err error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return 0, 0, fmt.Errorf("store: %w", err)
	}
	defer pool.Close()
	applied, err = migrate(ctx, pool)
	if err != nil {
		return applied, 0, err
	}
	version, err = schemaVersion(ctx, pool)
	return applied, version, err
}

// Info is what `oncegate check --connect` reports of a database.
type Info struct {
	ServerVersion string
	// SchemaVersion is the migrations applied (0: none yet; Open applies
	// them); Version() is this binary's.
	SchemaVersion int
}

// Probe connects without changing anything and says what it found.
func Probe(ctx context.Context, url string) (*Info, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer pool.Close()
	var info Info
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&info.ServerVersion); err != nil {
		return nil, fmt.Errorf("reach %s: %w", Redact(url), err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('oncegate_schema') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		if info.SchemaVersion, err = schemaVersion(ctx, pool); err != nil {
			return nil, err
		}
	}
	return &info, nil
}

// Ping commits a heartbeat (read-only: asks the server).
func (s *Store) Ping(ctx context.Context) error {
	if s.batch == nil {
		return s.pool.Ping(ctx)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO meta (k, v) VALUES ('heartbeat', int8send($1)) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, time.Now().UnixNano())
	return err
}

// Close sends what is queued and closes the pool.
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	s.pool.Close()
	return nil
}

// count runs one of the hot writes — a statement answering with a count —
// through the group-commit batcher.
// order places it in a batch (see batch.go).
func (s *Store) count(ctx context.Context, order, sql string, args ...any) (int, error) {
	if s.batch == nil {
		return 0, ledger.ErrReadOnly
	}
	return s.batch.count(ctx, order, sql, args...)
}

// Redact returns a database URL fit for logs and errors: its password
// replaced.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return passwordParam.ReplaceAllString(dsn, "password=xxxxx")
}

var passwordParam = regexp.MustCompile(`password=('[^']*'|\S+)`)

// hasParam reports whether a URL (or key=value string) sets key.
func hasParam(dsn, key string) bool {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Query().Has(key)
	}
	return regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(key) + `=`).MatchString(dsn)
}
