package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger"
)

const recordCols = `identity, request_id, tenant, operation, request_sha256, stream, state, owner, generation, lease_until, created_at, finished_at, response`

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (*ledger.Record, error) {
	var r ledger.Record
	var stream int
	var lease, created, finished int64
	var resp []byte
	if err := row.Scan(&r.Identity, &r.RequestID, &r.Tenant, &r.Operation, &r.RequestSHA256, &stream, &r.State,
		&r.Owner, &r.Generation, &lease, &created, &finished, &resp); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	r.Stream, r.LeaseUntil, r.CreatedAt, r.FinishedAt = stream == 1, fromNS(lease), fromNS(created), fromNS(finished)
	if len(resp) > 0 {
		var err error
		if r.Response, err = ledger.DecodeResponse(resp); err != nil {
			return nil, fmt.Errorf("stored response of %s: %w", r.RequestID, err)
		}
	}
	return &r, nil
}

// Get returns the record for identity.
func (s *Store) Get(ctx context.Context, identity string) (*ledger.Record, error) {
	return scanRecord(s.r.QueryRowContext(ctx, `SELECT `+recordCols+` FROM requests WHERE identity = ?`, identity))
}

// Unfinished lists in-progress records with their events.
func (s *Store) Unfinished(ctx context.Context) ([]ledger.Unfinished, error) {
	return s.unfinished(ctx, "", nil)
}

// Lapsed lists in-progress records whose lease lapsed before at, with
// their events.
func (s *Store) Lapsed(ctx context.Context, at time.Time) ([]ledger.Unfinished, error) {
	// Gateways sweep for lapsed leases every few seconds and almost never
	// find one: one cheap probe first.
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM requests WHERE finished_at = 0 AND state = 'in_progress' AND lease_until < ? LIMIT 1`, ns(at)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lapsed: %w", err)
	}
	return s.unfinished(ctx, ` AND lease_until < ?`, []any{ns(at)})
}

// unfinished lists in-progress records that also meet cond (on the
// requests table, with args), with their events.
func (s *Store) unfinished(ctx context.Context, cond string, args []any) ([]ledger.Unfinished, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+recordCols+` FROM requests WHERE finished_at = 0 AND state = 'in_progress'`+cond, args...)
	if err != nil {
		return nil, err
	}
	var recs []*ledger.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(recs) == 0 {
		return nil, err
	}
	evs, err := s.events(ctx, `SELECT e.request_id, e.seq, e.generation, e.type, e.at, e.data FROM events e
		JOIN requests r ON r.request_id = e.request_id WHERE r.finished_at = 0 AND r.state = 'in_progress' AND e.seq > 0`+
		strings.ReplaceAll(cond, "lease_until", "r.lease_until")+`
		ORDER BY e.request_id, e.seq`, args...)
	if err != nil {
		return nil, err
	}
	return ledger.WithEvents(recs, evs), nil
}

// scanEvents reads one row of (request_id, seq, generation, type, at,
// data) as its events.
func scanEvents(row scanner) ([]ledger.Event, error) {
	var id, typ string
	var seq, gen, at int64
	var data []byte
	if err := row.Scan(&id, &seq, &gen, &typ, &at, &data); err != nil {
		return nil, err
	}
	return expandRow(id, seq, gen, typ, at, data)
}

// Events returns a request's events in order.
func (s *Store) Events(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, seq, generation, type, at, data FROM events WHERE request_id = ? AND seq > 0 ORDER BY seq`, requestID)
}

// StaleEvents returns the writes fenced off for a request (evidence).
func (s *Store) StaleEvents(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, 0, generation, type, at, data FROM stale_events WHERE request_id = ?`, requestID)
}

func (s *Store) events(ctx context.Context, q string, args ...any) ([]ledger.Event, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.Event
	for rows.Next() {
		evs, err := scanEvents(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, rows.Err()
}

// Receipt returns a tenant's receipt.
func (s *Store) Receipt(ctx context.Context, tenant, requestID string) ([]byte, error) {
	var body []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM events WHERE request_id = ? AND seq = 0 AND tenant = ?`, requestID, tenant).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ledger.ErrNotFound
	}
	return body, err
}

// Receipts lists a tenant's receipts after `after`.
func (s *Store) Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT data FROM events WHERE tenant = ? AND seq = 0 AND (? = '' OR request_id < ?) ORDER BY request_id DESC LIMIT ?`,
		tenant, after, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// Spend returns each tenant's charges on a UTC day.
func (s *Store) Spend(ctx context.Context, day int64) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant, charged FROM tenant_spend WHERE day = ?`, day)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var t string
		var v int64
		if err := rows.Scan(&t, &v); err != nil {
			return nil, err
		}
		out[t] = v
	}
	return out, rows.Err()
}

// TenantSpend sums each tenant's charges over the UTC days [fromDay, toDay].
func (s *Store) TenantSpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant, SUM(charged) FROM tenant_spend WHERE day >= ? AND day <= ? GROUP BY tenant`, fromDay, toDay)
	if err != nil {
		return nil, fmt.Errorf("tenant spend: %w", err)
	}
	return scanSpend(rows)
}

// scanSpend reads rows of (name, nano-USD).
func scanSpend(rows *sql.Rows) (map[string]int64, error) {
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var t string
		var v int64
		if err := rows.Scan(&t, &v); err != nil {
			return nil, err
		}
		out[t] = v
	}
	return out, rows.Err()
}

// State returns a named value from the meta table.
func (s *Store) State(ctx context.Context, name string) ([]byte, error) {
	var v []byte
	err := s.r.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = ?`, "state:"+name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ledger.ErrNotFound
	}
	return v, err
}
