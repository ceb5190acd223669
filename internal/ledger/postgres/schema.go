package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/keysql"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// migrations are applied in order, once each, at Open or by `oncegate
// migrate`; the schema version is the number applied. Times are Unix
// nanoseconds (bigint), as in the SQLite backend, so both return the same
// instants; 0 means none.
var migrations = []string{
	`CREATE TABLE requests (
		identity       text PRIMARY KEY,
		request_id     text NOT NULL UNIQUE,
		tenant         text NOT NULL,
		operation      text NOT NULL,
		request_sha256 text NOT NULL,
		stream         boolean NOT NULL,
		state          text NOT NULL,
		owner          text NOT NULL,
		generation     bigint NOT NULL,
		lease_until    bigint NOT NULL,
		created_at     bigint NOT NULL,
		finished_at    bigint NOT NULL DEFAULT 0,
		response       bytea
	);
	CREATE INDEX requests_in_progress ON requests (lease_until) WHERE state = 'in_progress';
	CREATE INDEX requests_finished ON requests (finished_at) WHERE state <> 'in_progress';
	CREATE TABLE events (
		request_id text NOT NULL,
		seq        bigint NOT NULL,
		generation bigint NOT NULL,
		type       text NOT NULL,
		at         bigint NOT NULL,
		data       bytea,
		PRIMARY KEY (request_id, seq)
	);
	CREATE TABLE stale_events (
		request_id text NOT NULL,
		generation bigint NOT NULL,
		type       text NOT NULL,
		at         bigint NOT NULL,
		data       bytea
	);
	CREATE INDEX stale_events_by_request ON stale_events (request_id);
	CREATE TABLE receipts (
		request_id text PRIMARY KEY,
		tenant     text NOT NULL,
		body       bytea NOT NULL
	);
	CREATE INDEX receipts_by_tenant ON receipts (tenant, request_id);
	CREATE TABLE tenant_spend (
		day     bigint NOT NULL,
		tenant  text NOT NULL,
		charged bigint NOT NULL,
		PRIMARY KEY (day, tenant)
	);
	CREATE TABLE meta (k text PRIMARY KEY, v bytea NOT NULL);`,

	// 2: a tenant's day is spread over spendShards rows, each charge
	// going to the row its request id picks: one row for everyone was a
	// lock every finishing request of a tenant waited on, held until the
	// commit before it was flushed to disk.
	`ALTER TABLE tenant_spend ADD COLUMN shard smallint NOT NULL DEFAULT 0;
	ALTER TABLE tenant_spend DROP CONSTRAINT tenant_spend_pkey;
	ALTER TABLE tenant_spend ADD PRIMARY KEY (day, tenant, shard);`,

	// 3: the turn ledger of stored conversations (docs/conversations.md).
	turnsql.Schema("bytea", "bigint"),

	// 4: an orphan is recorded once per upstream copy.
	turnsql.UniqueOrphans(`DELETE FROM orphans a USING orphans b WHERE a.ctid > b.ctid AND a.tenant = b.tenant AND a.conversation = b.conversation AND a.upstream_id = b.upstream_id`),

	// 5: a response may be continued more than once: turns are
	// numbered among their parent's continuations.
	turnsql.Branches("bigint"),

	// 6: virtual keys issued at run time, and what each was charged per
	// UTC day, spread over shards as tenant_spend is (docs/keys-and-teams.md).
	keysql.Schema("bytea", "bigint") + `;
	ALTER TABLE key_spend ADD COLUMN shard smallint NOT NULL DEFAULT 0;
	ALTER TABLE key_spend DROP CONSTRAINT key_spend_pkey;
	ALTER TABLE key_spend ADD PRIMARY KEY (day, key_id, shard);`,

	// 7: which virtual key made each turn: a virtual key reads,
	// continues and deletes only its own (docs/keys-and-teams.md).
	turnsql.Owners(),

	// 8: retention (docs/receipts.md, "Retention"): the sweep and
	// `oncegate receipts export` find requests by when they were created
	// — their first event's time — oldest first, in a partial index of
	// one entry a request.
	`CREATE INDEX events_created ON events (at, request_id) WHERE seq = 1`,

	// 9: every change to a key is one conditional write on its version,
	// and each previous secret keeps its own grace (docs/keys-and-teams.md).
	keysql.Versions("bigint"),

	// 10: teams, tenants created at run time (docs/keys-and-teams.md,
	// "Teams").
	keysql.TenantSchema("bytea", "bigint"),

	// 11: the spend facts of each receipt (docs/spend.md, "How the report
	// reads"), read by tenant and creation time. The facts of receipts
	// stored before are derived in the migration's transaction
	// (backfillSpend).
	spendsql.Table(dialect, "PRIMARY KEY (request_id)", "") + `;
	CREATE INDEX receipt_spend_by_tenant ON receipt_spend (tenant, created_at)`,
}

// dialect is PostgreSQL's spend SQL.
var dialect = spendsql.Dialect{Integer: "bigint", Contains: "strpos(tags, ?) > 0", Sum: func(e string) string { return "SUM(" + e + ")::bigint" }}

// steps run after a migration's SQL, in its transaction, by its number.
var steps = map[int]func(ctx context.Context, tx pgx.Tx) error{11: backfillSpend}

// backfillSpend derives the spend facts of the receipts stored before
// migration 11.
func backfillSpend(ctx context.Context, tx pgx.Tx) error {
	return spendsql.Backfill(func(after string) ([]spendsql.Stored, error) {
		rows, err := tx.Query(ctx, `SELECT request_id, tenant, body FROM receipts WHERE request_id > $1 ORDER BY request_id LIMIT $2`,
			after, spendsql.BackfillPage)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (spendsql.Stored, error) {
			var rc spendsql.Stored
			err := row.Scan(&rc.RequestID, &rc.Tenant, &rc.Body)
			return rc, err
		})
	}, func(facts []*ledger.SpendFacts) error {
		var ids, tenants, keys, names, users, models, tags []string
		var created, attempts, in, out, cost, orphans []int64
		for _, f := range facts {
			ids, tenants, keys, names, users, models, tags = append(ids, f.RequestID), append(tenants, f.Tenant), append(keys, f.KeyID),
				append(names, f.KeyName), append(users, f.User), append(models, f.Model), append(tags, f.Tags)
			created, attempts, in, out, cost, orphans = append(created, f.Created), append(attempts, f.Attempts), append(in, f.InputTokens),
				append(out, f.OutputTokens), append(cost, f.Cost), append(orphans, f.Orphans)
		}
		_, err := tx.Exec(ctx, `INSERT INTO receipt_spend (`+ledger.SpendFactCols+`) SELECT * FROM unnest($1::text[], $2::text[],
			$3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[],
			$12::bigint[], $13::bigint[]) ON CONFLICT (request_id) DO NOTHING`,
			ids, tenants, created, keys, names, users, models, tags, attempts, in, out, cost, orphans)
		return err
	})
}

// spendShards is how many rows a tenant's day is spread over.
const spendShards = 32

// migrationLock is the advisory lock that serialises migrations: replicas
// starting together migrate once, the others wait and find it done.
const migrationLock = 0x6f6e63656761 // "oncega"

// Version is the schema version this binary migrates to.
func Version() int { return len(migrations) }

// migrate applies the migrations the database lacks, each in its own
// transaction under migrationLock, and returns how many it applied. A
// database migrated by a newer binary (a version past ours) is an error:
// this binary does not know its schema.
func migrate(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	applied := 0
	for {
		n, done, err := migrateOne(ctx, pool)
		if err != nil {
			return applied, err
		}
		applied += n
		if done {
			return applied, nil
		}
	}
}

func migrateOne(ctx context.Context, pool *pgxpool.Pool) (applied int, done bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS oncegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		v, err := schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("the database's schema is version %d, newer than this binary's %d: upgrade oncegate", v, len(migrations))
		}
		if v == len(migrations) {
			done = true
			return nil
		}
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migration %d: %w", v+1, err)
		}
		if step := steps[v+1]; step != nil {
			if err := step(ctx, tx); err != nil {
				return fmt.Errorf("migration %d: %w", v+1, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO oncegate_schema (version) VALUES ($1)`, v+1); err != nil {
			return err
		}
		applied = 1
		return nil
	})
	return applied, done, err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM oncegate_schema`).Scan(&v)
	return v, err
}
