package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

var (
	qInsertTurn   = turnsql.Dollar(turnsql.Insert + ` ON CONFLICT DO NOTHING`)
	qByKey        = turnsql.Dollar(turnsql.ByKey)
	qLiveChild    = turnsql.Dollar(turnsql.LiveChild)
	qByID         = turnsql.Dollar(turnsql.ByID)
	qByFinger     = turnsql.Dollar(turnsql.ByFingerprint)
	qByConv       = turnsql.Dollar(turnsql.ByConv)
	qUpdateTurn   = turnsql.Dollar(turnsql.Update)
	qInsertOrphan = turnsql.Dollar(turnsql.InsertOrphan)
	qOrphansOf    = turnsql.Dollar(turnsql.OrphansOf)
)

// BeginTurn writes a pending turn unless its key or a live sibling has
// one. The unique indexes decide between gateways racing for the same
// place: the loser's insert does nothing, and it reads the winner's turn.
func (s *Store) BeginTurn(ctx context.Context, t *ledger.Turn) (*ledger.Turn, bool, error) {
	for range 5 {
		tag, err := s.pool.Exec(ctx, qInsertTurn, turnsql.Args(t)...)
		if err != nil {
			return nil, false, fmt.Errorf("begin turn: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, true, nil
		}
		if t.KeyDigest != "" {
			e, err := turnsql.Scan(s.pool.QueryRow(ctx, qByKey, t.Tenant, t.KeyDigest), pgx.ErrNoRows)
			if !errors.Is(err, ledger.ErrNotFound) {
				return e, false, err
			}
		}
		if t.Parent != "" {
			e, err := turnsql.Scan(s.pool.QueryRow(ctx, qLiveChild, t.Parent), pgx.ErrNoRows)
			if !errors.Is(err, ledger.ErrNotFound) {
				return e, false, err
			}
		}
		// The turn in the way moved on (it failed, freeing the parent):
		// try again.
	}
	return nil, false, fmt.Errorf("begin turn %s: the conversation kept changing", t.ResponseID)
}

// UpdateTurn writes a turn's mutable fields if it is still in from at fromTry.
func (s *Store) UpdateTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	tag, err := s.pool.Exec(ctx, qUpdateTurn, turnsql.UpdateArgs(t, from, fromTry)...)
	if err != nil {
		return false, fmt.Errorf("update turn: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Turn returns a tenant's turn.
func (s *Store) Turn(ctx context.Context, tenant, responseID string) (*ledger.Turn, error) {
	return turnsql.Scan(s.pool.QueryRow(ctx, qByID, tenant, responseID), pgx.ErrNoRows)
}

// TurnByFingerprint returns the newest turn with a fingerprint and parent.
func (s *Store) TurnByFingerprint(ctx context.Context, tenant, fingerprint, parent string) (*ledger.Turn, error) {
	return turnsql.Scan(s.pool.QueryRow(ctx, qByFinger, tenant, fingerprint, parent), pgx.ErrNoRows)
}

// ConversationTurns returns a conversation's turns.
func (s *Store) ConversationTurns(ctx context.Context, tenant, conversation string) ([]*ledger.Turn, error) {
	rows, err := s.pool.Query(ctx, qByConv, tenant, conversation)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Turn, error) { return turnsql.Scan(r, pgx.ErrNoRows) })
}

// AddOrphan records an orphaned generation once.
func (s *Store) AddOrphan(ctx context.Context, o *ledger.Orphan) (bool, error) {
	tag, err := s.pool.Exec(ctx, qInsertOrphan, turnsql.OrphanArgs(o)...)
	if err != nil {
		return false, fmt.Errorf("add orphan: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Orphans lists a conversation's orphans.
func (s *Store) Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error) {
	rows, err := s.pool.Query(ctx, qOrphansOf, tenant, conversation)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return turnsql.ScanAll(rows, turnsql.ScanOrphan)
}
