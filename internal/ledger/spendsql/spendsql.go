// Package spendsql is the SQL of the spend facts both SQL backends keep
// beside each receipt (docs/spend.md, "How the report reads"): the
// table, the statements that write and read it, and the migration step
// that derives the facts of receipts stored before it.
package spendsql

import (
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Dialect is what differs between the backends.
type Dialect struct {
	// Integer is the 64-bit integer type.
	Integer string
	// Contains is a condition true when the column tags holds the
	// placeholder's string (SQLite: "instr(tags, ?) > 0").
	Contains string
	// Sum wraps an aggregate sum so it scans as a 64-bit integer.
	Sum func(expr string) string
}

// Table creates the spend facts' table: one row a receipt, found by its
// request id (a receipt stored again replaces its row) and read by
// tenant and creation time; suffix ends the CREATE TABLE (SQLite:
// " WITHOUT ROWID").
func Table(d Dialect, primary, suffix string) string {
	return strings.NewReplacer("INTEGER", d.Integer, "PRIMARY", primary).Replace(`CREATE TABLE receipt_spend (
		request_id    TEXT NOT NULL,
		tenant        TEXT NOT NULL,
		created_at    INTEGER NOT NULL,
		key_id        TEXT NOT NULL,
		key_name      TEXT NOT NULL,
		end_user      TEXT NOT NULL,
		model         TEXT NOT NULL,
		tags          TEXT NOT NULL,
		attempts      INTEGER NOT NULL,
		input_tokens  INTEGER NOT NULL,
		output_tokens INTEGER NOT NULL,
		cost          INTEGER NOT NULL,
		orphans       INTEGER NOT NULL,
		PRIMARY
	)`) + suffix
}

// Upsert writes one receipt's facts (ledger.SpendFacts.Args), replacing
// those of an earlier copy of the receipt.
const Upsert = `INSERT INTO receipt_spend (` + ledger.SpendFactCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (request_id) DO UPDATE SET tenant = excluded.tenant, created_at = excluded.created_at, key_id = excluded.key_id,
	key_name = excluded.key_name, end_user = excluded.end_user, model = excluded.model, tags = excluded.tags,
	attempts = excluded.attempts, input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
	cost = excluded.cost, orphans = excluded.orphans`

// Insert writes one receipt's facts unless it has some (the migration:
// facts a gateway wrote meanwhile are the receipt's latest).
const Insert = `INSERT INTO receipt_spend (` + ledger.SpendFactCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)
	ON CONFLICT (request_id) DO NOTHING`

// Query is the statement that answers q, with its arguments.
func Query(d Dialect, q ledger.SpendQuery) (string, []any) {
	var group, extra string
	switch q.By {
	case ledger.ByTenant:
		group = "tenant"
	case ledger.ByKey:
		group, extra = "key_id, key_name", ", MIN(request_id)"
	case ledger.ByKeyName:
		group = "key_name"
	case ledger.ByUser:
		group = "end_user"
	case ledger.ByModel:
		group = "model"
	case ledger.ByDay:
		group = "created_at / 86400000000000"
	default:
		group = "tags"
	}
	var where []string
	var args []any
	switch {
	case q.Tenants != nil && len(q.Tenants) == 0:
		where = append(where, "1 = 0") // no tenant: PostgreSQL has no empty IN ()
	case q.Tenants != nil:
		where = append(where, "tenant IN ("+strings.TrimSuffix(strings.Repeat("?,", len(q.Tenants)), ",")+")")
		for _, t := range q.Tenants {
			args = append(args, t)
		}
	}
	where = append(where, "created_at >= ?", "created_at < ?")
	args = append(args, ledger.UnixNano(q.From), ledger.UnixNano(q.To))
	for _, f := range []struct{ col, v string }{{"key_id", q.Key}, {"key_name", q.KeyName}, {"end_user", q.User}, {"model", q.Model}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if q.Tag != "" {
		where = append(where, d.Contains)
		args = append(args, ledger.TagNeedle(q.Tag))
	}
	sql := `SELECT ` + group + `, COUNT(*), ` + d.Sum("attempts") + `, ` + d.Sum("input_tokens") + `, ` + d.Sum("output_tokens") + `, ` +
		d.Sum("cost") + `, ` + d.Sum("orphans") + extra + ` FROM receipt_spend WHERE ` + strings.Join(where, " AND ") + ` GROUP BY ` + group
	return sql, args
}

// Scanner is a row of Query's answer.
type Scanner interface{ Scan(dest ...any) error }

// Rows are the rows of Query's answer (*sql.Rows, pgx.Rows).
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// ScanAll reads every row of Query's answer for q.
func ScanAll(q ledger.SpendQuery, rows Rows) ([]ledger.SpendSum, error) {
	var out []ledger.SpendSum
	for rows.Next() {
		sum, err := Scan(q, rows)
		if err != nil {
			return nil, fmt.Errorf("spend: %w", err)
		}
		out = append(out, sum)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("spend: %w", err)
	}
	return out, nil
}

// Scan reads one row of Query's answer for q.
func Scan(q ledger.SpendQuery, row Scanner) (ledger.SpendSum, error) {
	var s ledger.SpendSum
	sums := []any{&s.Requests, &s.Attempts, &s.InputTokens, &s.OutputTokens, &s.Cost, &s.Orphans}
	var dest []any
	switch q.By {
	case ledger.ByKey:
		dest = append(append([]any{&s.Group, &s.Name}, sums...), &s.First)
	case ledger.ByDay:
		dest = append([]any{&s.Day}, sums...)
	default:
		dest = append([]any{&s.Group}, sums...)
	}
	err := row.Scan(dest...)
	return s, err
}

// Stored is a receipt as Backfill reads it.
type Stored struct {
	RequestID, Tenant string
	Body              []byte
}

// BackfillPage is how many receipts Backfill reads at a time.
const BackfillPage = 1000

// Backfill derives the facts of every stored receipt (ledger.ReceiptFacts)
// and writes them with put, a page at a time: the migration that adds
// the facts, in its transaction. page lists up to BackfillPage receipts
// by request id after `after`.
func Backfill(page func(after string) ([]Stored, error), put func([]*ledger.SpendFacts) error) error {
	after := ""
	for {
		rcs, err := page(after)
		if err != nil {
			return err
		}
		facts := make([]*ledger.SpendFacts, 0, len(rcs))
		for _, rc := range rcs {
			if f, ok := ledger.ReceiptFacts(rc.Tenant, rc.RequestID, rc.Body); ok {
				facts = append(facts, f)
			}
			after = rc.RequestID
		}
		if len(facts) > 0 {
			if err := put(facts); err != nil {
				return err
			}
		}
		if len(rcs) < BackfillPage {
			return nil
		}
	}
}
