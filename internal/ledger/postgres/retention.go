package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Retention (docs/receipts.md, "Retention"): a request is dated by its
// first event's row (seq 1: its creation), found in creation order by the
// partial index events_created. Each batch of the sweep is one statement,
// so one transaction: it picks the oldest requests without a record and
// deletes their events, receipts and fenced-off writes together. Replicas
// sweeping at once pick the same requests and the later one finds them
// gone. A plain DELETE leaves the rows' space to autovacuum, which makes
// it reusable for new rows; the tables do not shrink (docs/receipts.md).
const qSweep = `WITH old AS (
		SELECT e.request_id FROM events e WHERE e.seq = 1 AND e.at < $1
		AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.request_id = e.request_id)
		ORDER BY e.at LIMIT $2
	), ev AS (
		DELETE FROM events WHERE request_id IN (SELECT request_id FROM old)
	), rc AS (
		DELETE FROM receipts WHERE request_id IN (SELECT request_id FROM old)
	), st AS (
		DELETE FROM stale_events WHERE request_id IN (SELECT request_id FROM old)
	), sf AS (
		DELETE FROM receipt_spend WHERE request_id IN (SELECT request_id FROM old)
	) SELECT count(*) FROM old`

// Sweep deletes the histories of requests created before cutoff that
// have no record, ledger.SweepBatch requests a transaction.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	if s.batch == nil {
		return 0, ledger.ErrReadOnly
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int
		if err := s.pool.QueryRow(ctx, qSweep, ns(cutoff), ledger.SweepBatch).Scan(&n); err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += n
		if n < ledger.SweepBatch {
			return total, nil
		}
	}
}

// ReceiptsBefore lists the receipts of requests created before `before`,
// oldest first, after `after`.
func (s *Store) ReceiptsBefore(ctx context.Context, before time.Time, after *ledger.DatedReceipt, limit int) ([]ledger.DatedReceipt, error) {
	afterAt, afterID := int64(math.MinInt64), ""
	if after != nil {
		afterAt, afterID = ns(after.Created), after.RequestID
	}
	rows, err := s.pool.Query(ctx, `SELECT e.request_id, e.at, r.tenant, r.body FROM events e
		JOIN receipts r ON r.request_id = e.request_id
		WHERE e.seq = 1 AND e.at < $1 AND (e.at, e.request_id) > ($2, $3)
		ORDER BY e.at, e.request_id LIMIT $4`, ns(before), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("receipts before %s: %w", before.Format(time.RFC3339), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.DatedReceipt, error) {
		var d ledger.DatedReceipt
		var at int64
		err := row.Scan(&d.RequestID, &at, &d.Tenant, &d.Body)
		d.Created = fromNS(at)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("receipts before %s: %w", before.Format(time.RFC3339), err)
	}
	return out, nil
}
