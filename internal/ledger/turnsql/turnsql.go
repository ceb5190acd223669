// Package turnsql is the SQL of the turn ledger that the SQLite and
// PostgreSQL backends share: the table, the statements (written with ?
// placeholders; Dollar numbers them for PostgreSQL) and the row scanner.
// Both store times as Unix nanoseconds and flags as integers, so one
// scanner reads either.
package turnsql

import (
	"errors"
	"strconv"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Schema creates the turn and orphan tables; blob and integer name the
// backend's types for bytes and 64-bit integers.
func Schema(blob, integer string) string {
	r := strings.NewReplacer("BLOB", blob, "INTEGER", integer)
	return r.Replace(`CREATE TABLE turns (
		response_id    TEXT PRIMARY KEY,
		tenant         TEXT NOT NULL,
		conversation   TEXT NOT NULL,
		parent         TEXT NOT NULL,
		depth          INTEGER NOT NULL,
		key_digest     TEXT NOT NULL,
		fingerprint    TEXT NOT NULL,
		request_sha256 TEXT NOT NULL,
		state          TEXT NOT NULL,
		try            INTEGER NOT NULL,
		request_id     TEXT NOT NULL,
		ambiguous      INTEGER NOT NULL,
		input          BLOB,
		request        BLOB,
		response       BLOB,
		status         INTEGER NOT NULL,
		upstream       BLOB,
		deleted        INTEGER NOT NULL,
		created_at     INTEGER NOT NULL,
		updated_at     INTEGER NOT NULL
	);
	CREATE UNIQUE INDEX turns_by_key ON turns (tenant, key_digest) WHERE key_digest <> '';
	CREATE UNIQUE INDEX turns_live_child ON turns (parent) WHERE parent <> '' AND state <> 'failed';
	CREATE INDEX turns_by_fingerprint ON turns (tenant, fingerprint, parent);
	CREATE INDEX turns_by_conversation ON turns (tenant, conversation);
	CREATE TABLE orphans (
		tenant        TEXT NOT NULL,
		conversation  TEXT NOT NULL,
		response_id   TEXT NOT NULL,
		upstream_id   TEXT NOT NULL,
		route         TEXT NOT NULL,
		input_tokens  INTEGER NOT NULL,
		output_tokens INTEGER NOT NULL,
		cost          INTEGER NOT NULL,
		at            INTEGER NOT NULL
	);
	CREATE INDEX orphans_by_conversation ON orphans (tenant, conversation, at);`)
}

// UniqueOrphans is the migration that makes an orphan's record unique by
// its upstream id within its conversation (a removal interrupted by a
// crash is found, and recorded, again); dedupe first deletes the copies
// an older binary may have recorded twice.
func UniqueOrphans(dedupe string) string {
	return dedupe + `;
	CREATE UNIQUE INDEX orphans_by_upstream ON orphans (tenant, conversation, upstream_id);`
}

// Branches is the migration that lets a response be continued more than
// once (docs/conversations.md): the one-live-child index goes, and each
// turn is numbered among its parent's continuations, unique per parent.
// Existing continuations are numbered live ones first (a parent had at
// most one: on a stateful route it went on in the parent's upstream
// conversation), then failed ones, each in the order they were begun.
// integer names the backend's 64-bit integer type.
func Branches(integer string) string {
	failed := func(t string) string { return `(CASE WHEN ` + t + `.state = 'failed' THEN 1 ELSE 0 END)` }
	return `ALTER TABLE turns ADD COLUMN branch ` + integer + ` NOT NULL DEFAULT 0;
	UPDATE turns SET branch = (SELECT COUNT(*) FROM turns o WHERE o.parent = turns.parent AND o.response_id <> turns.response_id AND (
		` + failed("o") + ` < ` + failed("turns") + ` OR ` + failed("o") + ` = ` + failed("turns") + ` AND (
		o.created_at < turns.created_at OR o.created_at = turns.created_at AND o.response_id < turns.response_id)))
	WHERE parent <> '';
	DROP INDEX turns_live_child;
	CREATE UNIQUE INDEX turns_branch ON turns (parent, branch) WHERE parent <> '';`
}

// Owners is the migration that records which virtual key made each turn
// (docs/keys-and-teams.md): a virtual key reads, continues and deletes only its
// own. The turns stored before it name no key: they are the tenant's
// file keys' to read, as a file key's turn is.
func Owners() string {
	return `ALTER TABLE turns ADD COLUMN key_id TEXT NOT NULL DEFAULT ''`
}

// Cols are a turn row's columns, in Args and Scan order.
const Cols = `response_id, tenant, conversation, parent, depth, branch, key_digest, fingerprint, request_sha256, state, try, request_id, ambiguous, input, request, response, status, upstream, deleted, created_at, updated_at, key_id`

// The statements.
const (
	Insert     = `INSERT INTO turns (` + Cols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	ByKey      = `SELECT ` + Cols + ` FROM turns WHERE tenant = ? AND key_digest = ? AND key_digest <> ''`
	NextBranch = `SELECT COALESCE(MAX(branch) + 1, 0) FROM turns WHERE parent = ? AND parent <> ''`
	// InFlightTwin is the keyless turn in flight an arrival of the same
	// body on the same parent continues (tenant, fingerprint, parent).
	InFlightTwin = `SELECT ` + Cols + ` FROM turns WHERE tenant = ? AND fingerprint = ? AND parent = ? AND fingerprint <> '' AND key_digest = ''
		AND deleted = 0 AND state IN ('pending', 'unknown') ORDER BY created_at DESC, response_id DESC LIMIT 1`
	ByID          = `SELECT ` + Cols + ` FROM turns WHERE tenant = ? AND response_id = ?`
	ByFingerprint = `SELECT ` + Cols + ` FROM turns WHERE tenant = ? AND fingerprint = ? AND parent = ? AND key_digest = '' AND deleted = 0
		ORDER BY created_at DESC, response_id DESC LIMIT 1`
	MarkDeleted = `UPDATE turns SET deleted = 1, updated_at = ? WHERE response_id = ? AND state = ? AND try = ?`
	// DeleteTry deletes a finished request record of a deleted turn's try.
	DeleteTry    = `DELETE FROM requests WHERE identity = ? AND state <> 'in_progress'`
	ByConv       = `SELECT ` + Cols + ` FROM turns WHERE tenant = ? AND conversation = ? ORDER BY depth, created_at, response_id`
	Update       = `UPDATE turns SET state = ?, try = ?, request_id = ?, ambiguous = ?, response = ?, status = ?, upstream = ?, deleted = ?, updated_at = ? WHERE response_id = ? AND state = ? AND try = ?`
	InsertOrphan = `INSERT INTO orphans (tenant, conversation, response_id, upstream_id, route, input_tokens, output_tokens, cost, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	OrphansOf    = `SELECT tenant, conversation, response_id, upstream_id, route, input_tokens, output_tokens, cost, at FROM orphans WHERE tenant = ? AND conversation = ? ORDER BY at`
)

// Dollar rewrites ? placeholders as $1, $2 … (PostgreSQL's).
func Dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Args are t's values for Insert.
func Args(t *ledger.Turn) []any {
	return []any{t.ResponseID, t.Tenant, t.Conversation, t.Parent, t.Depth, t.Branch, t.KeyDigest, t.Fingerprint, t.RequestSHA256,
		string(t.State), t.Try, t.RequestID, t.Ambiguous, t.Input, t.Request, t.Response, t.Status, t.Upstream, flag(t.Deleted),
		ledger.UnixNano(t.CreatedAt), ledger.UnixNano(t.UpdatedAt), t.KeyID}
}

// UpdateArgs are the values for Update.
func UpdateArgs(t *ledger.Turn, from ledger.TurnState, fromTry int) []any {
	return []any{string(t.State), t.Try, t.RequestID, t.Ambiguous, t.Response, t.Status, t.Upstream, flag(t.Deleted),
		ledger.UnixNano(t.UpdatedAt), t.ResponseID, string(from), fromTry}
}

// OrphanArgs are o's values for InsertOrphan.
func OrphanArgs(o *ledger.Orphan) []any {
	return []any{o.Tenant, o.Conversation, o.ResponseID, o.UpstreamID, o.Route, o.InputTokens, o.OutputTokens, o.Cost, ledger.UnixNano(o.At)}
}

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Scanner is a row: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Scan reads a turn row; noRows is the driver's "no rows" error, which
// becomes ledger.ErrNotFound.
func Scan(row Scanner, noRows error) (*ledger.Turn, error) {
	var t ledger.Turn
	var state string
	var depth, branch, try, ambiguous, status, deleted, created, updated int64
	if err := row.Scan(&t.ResponseID, &t.Tenant, &t.Conversation, &t.Parent, &depth, &branch, &t.KeyDigest, &t.Fingerprint, &t.RequestSHA256,
		&state, &try, &t.RequestID, &ambiguous, &t.Input, &t.Request, &t.Response, &status, &t.Upstream, &deleted, &created, &updated, &t.KeyID); err != nil {
		if errors.Is(err, noRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	t.State, t.Depth, t.Branch, t.Try, t.Ambiguous, t.Status, t.Deleted = ledger.TurnState(state), int(depth), int(branch), int(try), int(ambiguous), int(status), deleted == 1
	t.CreatedAt, t.UpdatedAt = ledger.FromUnixNano(created), ledger.FromUnixNano(updated)
	return &t, nil
}

// ScanOrphan reads an orphan row.
func ScanOrphan(row Scanner) (*ledger.Orphan, error) {
	var o ledger.Orphan
	var at int64
	if err := row.Scan(&o.Tenant, &o.Conversation, &o.ResponseID, &o.UpstreamID, &o.Route, &o.InputTokens, &o.OutputTokens, &o.Cost, &at); err != nil {
		return nil, err
	}
	o.At = ledger.FromUnixNano(at)
	return &o, nil
}

// Rows is a result set: *sql.Rows, pgx.Rows.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// ScanAll reads every row of rows with scan.
func ScanAll[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
