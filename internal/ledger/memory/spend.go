package memory

import (
	"context"

	"github.com/oncegate/oncegate/internal/ledger"
)

// SpendSums sums the spend facts of the receipts q asks for: each
// receipt's, kept beside it when it was stored.
func (s *Store) SpendSums(_ context.Context, q ledger.SpendQuery) ([]ledger.SpendSum, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return ledger.SumFacts(q, func(yield func(*ledger.SpendFacts) bool) {
		for _, rc := range s.receipts {
			if rc.facts != nil && !yield(rc.facts) {
				return
			}
		}
	}), nil
}
