package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// created is when request id was created — its first event's time — and
// whether it has that event (s.mu held).
func (s *Store) created(id string) (time.Time, bool) {
	evs := s.events[id]
	if len(evs) == 0 || evs[0].Seq != 1 {
		return time.Time{}, false
	}
	return evs[0].At, true
}

// Sweep deletes the histories of requests created before cutoff that
// have no record.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.sweepBatch(cutoff)
		total += n
		if err != nil || n < ledger.SweepBatch {
			return total, err
		}
	}
}

// sweepBatch deletes up to ledger.SweepBatch histories, oldest first.
func (s *Store) sweepBatch(cutoff time.Time) (int, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	type aged struct {
		id string
		at time.Time
	}
	var old []aged
	for id := range s.events {
		if at, ok := s.created(id); ok && at.Before(cutoff) && s.byID[id] == "" {
			old = append(old, aged{id, at})
		}
	}
	slices.SortFunc(old, func(a, b aged) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id)) })
	old = old[:min(len(old), ledger.SweepBatch)]
	gone := make(map[string]bool, len(old))
	for _, a := range old {
		gone[a.id] = true
		s.dropReceipt(a.id)
		delete(s.events, a.id)
		delete(s.stale, a.id)
	}
	if len(gone) > 0 {
		s.history = slices.DeleteFunc(s.history, func(id string) bool { return gone[id] })
	}
	return len(old), nil
}

// dropReceipt deletes a receipt and its place in its tenant's list, and
// reports whether there was one (s.mu held).
func (s *Store) dropReceipt(id string) bool {
	rc, ok := s.receipts[id]
	if !ok {
		return false
	}
	delete(s.receipts, id)
	ids := s.byTenant[rc.tenant]
	if i, found := slices.BinarySearch(ids, id); found {
		if i == 0 {
			ids = ids[1:] // the usual case: request ids are time-ordered
		} else {
			ids = slices.Delete(ids, i, i+1)
		}
		s.byTenant[rc.tenant] = ids
	}
	return true
}

// ReceiptsBefore lists the receipts of requests created before `before`,
// oldest first, after `after`.
func (s *Store) ReceiptsBefore(_ context.Context, before time.Time, after *ledger.DatedReceipt, limit int) ([]ledger.DatedReceipt, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []ledger.DatedReceipt
	for id, rc := range s.receipts {
		at, ok := s.created(id)
		if !ok || !at.Before(before) || after.Listed(at, id) {
			continue
		}
		out = append(out, ledger.DatedReceipt{RequestID: id, Tenant: rc.tenant, Created: at, Body: slices.Clone(rc.body)})
	}
	slices.SortFunc(out, func(a, b ledger.DatedReceipt) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.RequestID, b.RequestID))
	})
	return out[:min(len(out), limit)], nil
}
