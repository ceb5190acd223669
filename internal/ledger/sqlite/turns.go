package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// BeginTurn writes a pending turn, numbered among its parent's
// continuations, unless its key or a keyless twin in flight has one. The
// writer runs one transaction at a time, so the look and the write are
// one step.
func (s *Store) BeginTurn(ctx context.Context, t *ledger.Turn) (*ledger.Turn, bool, error) {
	var existing *ledger.Turn
	var created bool
	err := s.write(ctx, true, func(tx wtx) error {
		existing, created = nil, false
		find := func(q string, args ...any) (bool, error) {
			e, err := turnsql.Scan(tx.QueryRow(q, args...), sql.ErrNoRows)
			if errors.Is(err, ledger.ErrNotFound) {
				return false, nil
			}
			existing = e
			return err == nil, err
		}
		if t.KeyDigest != "" {
			if found, err := find(turnsql.ByKey, t.Tenant, t.KeyDigest); found || err != nil {
				return err
			}
		} else if t.Fingerprint != "" {
			if found, err := find(turnsql.InFlightTwin, t.Tenant, t.Fingerprint, t.Parent); found || err != nil {
				return err
			}
		}
		c := *t
		if err := tx.QueryRow(turnsql.NextBranch, t.Parent).Scan(&c.Branch); err != nil {
			return err
		}
		if _, err := tx.Exec(turnsql.Insert, turnsql.Args(&c)...); err != nil {
			return err
		}
		t.Branch, created = c.Branch, true
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("begin turn: %w", err)
	}
	return existing, created, nil
}

// UpdateTurn writes a turn's mutable fields if it is still in from at fromTry.
func (s *Store) UpdateTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	var ok bool
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(turnsql.Update, turnsql.UpdateArgs(t, from, fromTry)...)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("update turn: %w", err)
	}
	return ok, nil
}

// DeleteTurn marks a turn deleted and deletes its tries' records.
func (s *Store) DeleteTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	var ok bool
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(turnsql.MarkDeleted, ledger.UnixNano(t.UpdatedAt), t.ResponseID, string(from), fromTry)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			ok = false
			return nil
		}
		for _, id := range ledger.TryIdentities(t) {
			if _, err := tx.Exec(turnsql.DeleteTry, id); err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("delete turn: %w", err)
	}
	return ok, nil
}

// Turn returns a tenant's turn.
func (s *Store) Turn(ctx context.Context, tenant, responseID string) (*ledger.Turn, error) {
	return turnsql.Scan(s.r.QueryRowContext(ctx, turnsql.ByID, tenant, responseID), sql.ErrNoRows)
}

// TurnByFingerprint returns the newest turn with a fingerprint and parent.
func (s *Store) TurnByFingerprint(ctx context.Context, tenant, fingerprint, parent string) (*ledger.Turn, error) {
	return turnsql.Scan(s.r.QueryRowContext(ctx, turnsql.ByFingerprint, tenant, fingerprint, parent), sql.ErrNoRows)
}

// ConversationTurns returns a conversation's turns.
func (s *Store) ConversationTurns(ctx context.Context, tenant, conversation string) ([]*ledger.Turn, error) {
	rows, err := s.r.QueryContext(ctx, turnsql.ByConv, tenant, conversation)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Turn, error) { return turnsql.Scan(r, sql.ErrNoRows) })
}

// AddOrphan records an orphaned generation once.
func (s *Store) AddOrphan(ctx context.Context, o *ledger.Orphan) (bool, error) {
	added := false
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(turnsql.InsertOrphan, turnsql.OrphanArgs(o)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if added = n == 1; added {
			tx.charge(o.Tenant, o.Cost, o.At)
		}
		return err
	})
	return added, err
}

// Orphans lists a conversation's orphans.
func (s *Store) Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error) {
	rows, err := s.r.QueryContext(ctx, turnsql.OrphansOf, tenant, conversation)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return turnsql.ScanAll(rows, turnsql.ScanOrphan)
}
