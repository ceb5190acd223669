package sqlite

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Retention (docs/receipts.md, "Retention"): a request is dated by its
// first event's row (seq 1: its creation), found in creation order by the
// partial index events_created. The sweep deletes a batch of requests'
// histories — every events row of each (its receipt among them) and its
// fenced-off writes — in one of the writer's transactions, so that it
// never holds the writer for long and the batches of others' writes
// commit in between. The pages it frees go to the database's free list
// and later inserts reuse them: the file stops growing once a retention's
// worth of requests is in it (it does not shrink; see docs/receipts.md).

// qSweepable lists up to ? requests created before ? that have no record,
// oldest first.
const qSweepable = `SELECT e.request_id FROM events e WHERE e.seq = 1 AND e.at < ?
	AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.request_id = e.request_id)
	ORDER BY e.at LIMIT ?`

// Sweep deletes the histories of requests created before cutoff that
// have no record, ledger.SweepBatch requests a commit.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n := 0
		err := s.write(ctx, true, func(tx wtx) error {
			var err error
			n, err = sweepBatch(tx, ns(cutoff))
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		if n < ledger.SweepBatch {
			return total, nil
		}
	}
}

// sweepBatch deletes the histories of up to ledger.SweepBatch requests
// created before cutoff (Unix ns) that have no record.
func sweepBatch(tx wtx, cutoff int64) (int, error) {
	rows, err := tx.Query(qSweepable, cutoff, ledger.SweepBatch)
	if err != nil {
		return 0, err
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	in := placeholders(len(ids), 1)
	if _, err := tx.Exec(`DELETE FROM events WHERE request_id IN (`+in+`)`, ids...); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(`DELETE FROM stale_events WHERE request_id IN (`+in+`)`, ids...); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(`DELETE FROM receipt_spend WHERE request_id IN (`+in+`)`, ids...); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// ReceiptsBefore lists the receipts of requests created before `before`,
// oldest first, after `after` (read-only stores too).
func (s *Store) ReceiptsBefore(ctx context.Context, before time.Time, after *ledger.DatedReceipt, limit int) ([]ledger.DatedReceipt, error) {
	afterAt, afterID := int64(math.MinInt64), ""
	if after != nil {
		afterAt, afterID = ns(after.Created), after.RequestID
	}
	rows, err := s.r.QueryContext(ctx, `SELECT e.request_id, e.at, r.tenant, r.data FROM events e
		JOIN events r ON r.request_id = e.request_id AND r.seq = 0
		WHERE e.seq = 1 AND e.at < ? AND (e.at, e.request_id) > (?, ?)
		ORDER BY e.at, e.request_id LIMIT ?`, ns(before), afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("receipts before %s: %w", before.Format(time.RFC3339), err)
	}
	defer rows.Close()
	var out []ledger.DatedReceipt
	for rows.Next() {
		var d ledger.DatedReceipt
		var at int64
		if err := rows.Scan(&d.RequestID, &at, &d.Tenant, &d.Body); err != nil {
			return nil, fmt.Errorf("receipts before %s: %w", before.Format(time.RFC3339), err)
		}
		d.Created = fromNS(at)
		out = append(out, d)
	}
	return out, rows.Err()
}

// Sweep deletes the histories of requests created before cutoff that have
// no record, once the database has applied the log's records before the
// call. It cannot race the applier: both write in the writer's
// transactions, and a request the sweep finds without a record in the
// database has none in the index either — a Claim the log holds and the
// database does not yet is a new request with no rows to delete, and an
// Append or Finish of a request without a record is refused (kept as
// fenced-off evidence at most), so nothing the applier writes brings a
// swept receipt or its events back.
func (s *LogStore) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	if err := s.barrier(ctx); err != nil {
		return 0, err
	}
	return s.db.Sweep(ctx, cutoff)
}

// ReceiptsBefore lists the receipts of requests created before `before`,
// once the database has applied the log's records before the call.
func (s *LogStore) ReceiptsBefore(ctx context.Context, before time.Time, after *ledger.DatedReceipt, limit int) ([]ledger.DatedReceipt, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.ReceiptsBefore(ctx, before, after, limit)
}
