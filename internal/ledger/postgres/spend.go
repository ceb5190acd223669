package postgres

import (
	"context"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// SpendSums sums the spend facts of the receipts q asks for
// (docs/spend.md, "How the report reads"): the rows of receipt_spend its
// index by tenant and creation time finds.
func (s *Store) SpendSums(ctx context.Context, q ledger.SpendQuery) ([]ledger.SpendSum, error) {
	query, args := spendsql.Query(dialect, q)
	rows, err := s.pool.Query(ctx, turnsql.Dollar(query), args...)
	if err != nil {
		return nil, fmt.Errorf("spend: %w", err)
	}
	defer rows.Close()
	return spendsql.ScanAll(q, rows)
}
