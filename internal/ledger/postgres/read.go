package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/ledger"
)

func scanRecord(row pgx.Row) (*ledger.Record, error) {
	var r ledger.Record
	var lease, created, finished int64
	var state string
	var resp []byte
	if err := row.Scan(&r.Identity, &r.RequestID, &r.Tenant, &r.Operation, &r.RequestSHA256, &r.Stream, &state,
		&r.Owner, &r.Generation, &lease, &created, &finished, &resp); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	r.State, r.LeaseUntil, r.CreatedAt, r.FinishedAt = ledger.State(state), fromNS(lease), fromNS(created), fromNS(finished)
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
	return scanRecord(s.pool.QueryRow(ctx, `SELECT `+recordCols+` FROM requests WHERE identity = $1`, identity))
}

// Unfinished lists in-progress records with their events.
func (s *Store) Unfinished(ctx context.Context) ([]ledger.Unfinished, error) {
	return s.unfinished(ctx, "", nil)
}

// Lapsed lists in-progress records whose lease lapsed before at, with
// their events.
func (s *Store) Lapsed(ctx context.Context, at time.Time) ([]ledger.Unfinished, error) {
	return s.unfinished(ctx, ` AND lease_until < $1`, []any{ns(at)})
}

// unfinished lists in-progress records that also meet cond (on the
// requests table, with args), with their events.
func (s *Store) unfinished(ctx context.Context, cond string, args []any) ([]ledger.Unfinished, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+recordCols+` FROM requests WHERE state = 'in_progress'`+cond+` ORDER BY request_id`, args...)
	if err != nil {
		return nil, err
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ledger.Record, error) { return scanRecord(row) })
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.RequestID
	}
	evs, err := s.events(ctx, `SELECT request_id, seq, generation, type, at, data FROM events WHERE request_id = ANY($1) ORDER BY request_id, seq`, ids)
	if err != nil {
		return nil, err
	}
	return ledger.WithEvents(recs, evs), nil
}

// Events returns a request's events in order.
func (s *Store) Events(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, seq, generation, type, at, data FROM events WHERE request_id = $1 ORDER BY seq`, requestID)
}

// StaleEvents returns the writes fenced off for a request (evidence).
func (s *Store) StaleEvents(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, 0, generation, 'stale_owner_write', at, data FROM stale_events WHERE request_id = $1`, requestID)
}

func (s *Store) events(ctx context.Context, q string, args ...any) ([]ledger.Event, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Event, error) {
		var e ledger.Event
		var typ string
		var at int64
		err := row.Scan(&e.RequestID, &e.Seq, &e.Generation, &typ, &at, &e.Data)
		e.Type, e.At = ledger.EventType(typ), fromNS(at)
		return e, err
	})
}

// Receipt returns a tenant's receipt.
func (s *Store) Receipt(ctx context.Context, tenant, requestID string) ([]byte, error) {
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT body FROM receipts WHERE request_id = $1 AND tenant = $2`, requestID, tenant).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ledger.ErrNotFound
	}
	return body, err
}

// Receipts lists a tenant's receipts after `after`.
func (s *Store) Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT body FROM receipts WHERE tenant = $1 AND ($2 = '' OR request_id < $2) ORDER BY request_id DESC LIMIT $3`,
		tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[]byte])
}

// Spend returns each tenant's charges on a UTC day.
func (s *Store) Spend(ctx context.Context, day int64) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, sum(charged)::bigint FROM tenant_spend WHERE day = $1 GROUP BY tenant`, day)
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
	rows, err := s.pool.Query(ctx, `SELECT tenant, sum(charged)::bigint FROM tenant_spend WHERE day >= $1 AND day <= $2 GROUP BY tenant`, fromDay, toDay)
	if err != nil {
		return nil, fmt.Errorf("tenant spend: %w", err)
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

// State returns a named value from the meta table.
func (s *Store) State(ctx context.Context, name string) ([]byte, error) {
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT v FROM meta WHERE k = $1`, "state:"+name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ledger.ErrNotFound
	}
	return v, err
}
