package sqlite

import (
	"database/sql"
	"fmt"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger/keysql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// migrations are applied in order, once each; the schema version is the
// number applied.
var migrations = []string{
	`CREATE TABLE requests (
		identity       TEXT PRIMARY KEY,
		request_id     TEXT NOT NULL UNIQUE,
		tenant         TEXT NOT NULL,
		operation      TEXT NOT NULL,
		request_sha256 TEXT NOT NULL,
		stream         INTEGER NOT NULL,
		state          TEXT NOT NULL,
		owner          TEXT NOT NULL,
		generation     INTEGER NOT NULL,
		lease_until    INTEGER NOT NULL,
		created_at     INTEGER NOT NULL,
		finished_at    INTEGER NOT NULL DEFAULT 0,
		response       BLOB
	);
	CREATE INDEX requests_unfinished ON requests(state) WHERE state = 'in_progress';
	CREATE INDEX requests_finished_at ON requests(finished_at) WHERE state != 'in_progress';
	CREATE TABLE events (
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB,
		PRIMARY KEY (request_id, seq)
	) WITHOUT ROWID;
	CREATE TABLE stale_events (
		request_id TEXT NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB
	);
	CREATE TABLE receipts (
		request_id TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		body       BLOB NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX receipts_by_tenant ON receipts(tenant, request_id);
	CREATE TABLE meta (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;`,

	// 2: events and receipts are stored in the order they are written, with
	// their keys in small indexes. Keyed by request id, a request's events
	// and its receipt arrive after those of requests that started later,
	// so their rows landed mid-tree, splitting pages left two-thirds empty
	// and dirtying a random page per row in every commit.
	`CREATE TABLE events_v2 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB
	);
	INSERT INTO events_v2 (request_id, seq, generation, type, at, data)
		SELECT request_id, seq, generation, type, at, data FROM events ORDER BY request_id, seq;
	DROP TABLE events;
	ALTER TABLE events_v2 RENAME TO events;
	CREATE UNIQUE INDEX events_by_request ON events(request_id, seq);
	CREATE TABLE receipts_v2 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		tenant     TEXT NOT NULL,
		body       BLOB NOT NULL
	);
	INSERT INTO receipts_v2 (request_id, tenant, body) SELECT request_id, tenant, body FROM receipts ORDER BY request_id;
	DROP TABLE receipts;
	ALTER TABLE receipts_v2 RENAME TO receipts;
	CREATE UNIQUE INDEX receipts_by_id ON receipts(request_id);
	CREATE INDEX receipts_by_tenant ON receipts(tenant, request_id);`,

	// 3: fewer B-trees and rows per request, so a commit rewrites fewer
	// pages (each B-tree a commit touches costs a page; a request's two
	// commits wrote 19 before). One write's events share a row (see
	// events.go); the receipt is a row of the events table (seq 0) found
	// by the events index, listed by a partial index of receipts alone;
	// one index on finished_at (0 while in progress) replaces the partial
	// indexes of unfinished and of finished records.
	`CREATE TABLE events_v3 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		last_seq   INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		dispatched INTEGER NOT NULL DEFAULT 0,
		observed   INTEGER NOT NULL DEFAULT 0,
		tenant     TEXT,
		data       BLOB
	);
	INSERT INTO events_v3 (request_id, seq, last_seq, generation, type, at, dispatched, observed, data)
		SELECT request_id, seq, seq, generation, type, at, type = 'attempt_dispatched', type = 'attempt_observed', data FROM events ORDER BY id;
	INSERT INTO events_v3 (request_id, seq, last_seq, generation, type, at, tenant, data)
		SELECT request_id, 0, 0, 0, 'receipt', 0, tenant, body FROM receipts ORDER BY id;
	DROP TABLE events;
	DROP TABLE receipts;
	ALTER TABLE events_v3 RENAME TO events;
	CREATE UNIQUE INDEX events_by_request ON events(request_id, seq);
	CREATE UNIQUE INDEX receipts_by_tenant ON events(tenant, request_id) WHERE seq = 0;
	DROP INDEX requests_unfinished;
	DROP INDEX requests_finished_at;
	CREATE INDEX requests_by_finish ON requests(finished_at);`,

	// 4: each tenant's charges per UTC day, kept as receipts are stored,
	// so the day's spend survives a restart (docs/overload.md).
	`CREATE TABLE tenant_spend (
		day     INTEGER NOT NULL,
		tenant  TEXT NOT NULL,
		charged INTEGER NOT NULL,
		PRIMARY KEY (day, tenant)
	) WITHOUT ROWID;`,

	// 5: the turn ledger of stored conversations (docs/conversations.md).
	turnsql.Schema("BLOB", "INTEGER"),

	// 6: an orphan is recorded once per upstream copy.
	turnsql.UniqueOrphans(`DELETE FROM orphans WHERE rowid NOT IN (SELECT MIN(rowid) FROM orphans GROUP BY tenant, conversation, upstream_id)`),

	// 7: a response may be continued more than once: turns are
	// numbered among their parent's continuations.
	turnsql.Branches("INTEGER"),

	// 8: virtual keys issued at run time, and what each was charged per
	// UTC day (docs/keys-and-teams.md).
	keysql.Schema("BLOB", "INTEGER"),

	// 9: which virtual key made each turn: a virtual key reads,
	// continues and deletes only its own (docs/keys-and-teams.md).
	turnsql.Owners(),

	// 10: retention (docs/receipts.md, "Retention"): the sweep and
	// `oncegate receipts export` find requests by when they were created
	// — their first event's time — oldest first, in a partial index of
	// one small entry a request (a claim's commit adds one, at the
	// index's end); the sweep deletes a request's fenced-off writes with
	// the rest of its history, by request id.
	`CREATE INDEX events_created ON events(at) WHERE seq = 1;
	CREATE INDEX stale_events_by_request ON stale_events(request_id);`,

	// 11: every change to a key is one conditional write on its version,
	// and each previous secret keeps its own grace (docs/keys-and-teams.md).
	keysql.Versions("INTEGER"),

	// 12: teams, tenants created at run time (docs/keys-and-teams.md,
	// "Teams").
	keysql.TenantSchema("BLOB", "INTEGER"),
}

func migrate(db *sql.DB) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	if err := db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return err
	}
	if v >= len(migrations) {
		return nil
	}
	// Every pending migration in one transaction: a new database is made
	// with one commit (one sync) instead of one per migration, and an
	// upgrade cut short leaves the schema as it was.
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.Exec(migrations[i]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_version (version) VALUES (?)`, i+1); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// Version is the schema version this binary migrates to.
func Version() int { return len(migrations) }
