package sqlite

import (
	"context"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
)

// SpendSums sums the spend facts of the receipts q asks for
// (docs/spend.md, "How the report reads"): a range of the table
// receipt_spend, clustered by tenant and creation time, per tenant.
func (s *Store) SpendSums(ctx context.Context, q ledger.SpendQuery) ([]ledger.SpendSum, error) {
	query, args := spendsql.Query(dialect, q)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("spend: %w", err)
	}
	defer rows.Close()
	return spendsql.ScanAll(q, rows)
}

// SpendSums sums spend facts, once the database has applied the log's records before the call.
func (s *LogStore) SpendSums(ctx context.Context, q ledger.SpendQuery) ([]ledger.SpendSum, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.SpendSums(ctx, q)
}
