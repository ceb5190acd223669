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
	qTwin         = turnsql.Dollar(turnsql.InFlightTwin)
	qNextBranch   = turnsql.Dollar(turnsql.NextBranch)
	qMarkDeleted  = turnsql.Dollar(turnsql.MarkDeleted)
	qDeleteTry    = turnsql.Dollar(turnsql.DeleteTry)
	qByID         = turnsql.Dollar(turnsql.ByID)
	qByFinger     = turnsql.Dollar(turnsql.ByFingerprint)
	qByConv       = turnsql.Dollar(turnsql.ByConv)
	qUpdateTurn   = turnsql.Dollar(turnsql.Update)
	qInsertOrphan = turnsql.Dollar(turnsql.InsertOrphan)
	qOrphansOf    = turnsql.Dollar(turnsql.OrphansOf)
)

// turnLock is the first key of the advisory locks that order the turns
// begun on one place of a conversation (two-key locks never meet the
// one-key migration lock).
const turnLock = 0x7475726e // "turn"

// BeginTurn writes a pending turn, numbered among its parent's
// continuations, unless its key or a keyless twin in flight has one.
// Gateways racing for the same place take turns under an advisory lock
// on it (the parent, or a first turn's key or fingerprint), so the look
// and the write are one step; the unique indexes stand behind it.
func (s *Store) BeginTurn(ctx context.Context, t *ledger.Turn) (*ledger.Turn, bool, error) {
	for range 5 {
		existing, created, err := s.beginTurn(ctx, t)
		if err != nil {
			return nil, false, fmt.Errorf("begin turn: %w", err)
		}
		if existing != nil || created {
			return existing, created, nil
		}
		// The insert met a turn of the same key begun on another
		// place meanwhile: look again.
	}
	return nil, false, fmt.Errorf("begin turn %s: the conversation kept changing", t.ResponseID)
}

func (s *Store) beginTurn(ctx context.Context, t *ledger.Turn) (existing *ledger.Turn, created bool, err error) {
	place := "f:" + t.Tenant + "/" + t.Fingerprint
	switch {
	case t.Parent != "":
		place = "p:" + t.Parent
	case t.KeyDigest != "":
		place = "k:" + t.Tenant + "/" + t.KeyDigest
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(turnLock), place); err != nil {
			return err
		}
		find := func(q string, args ...any) (bool, error) {
			e, err := turnsql.Scan(tx.QueryRow(ctx, q, args...), pgx.ErrNoRows)
			if errors.Is(err, ledger.ErrNotFound) {
				return false, nil
			}
			existing = e
			return err == nil, err
		}
		if t.KeyDigest != "" {
			if found, err := find(qByKey, t.Tenant, t.KeyDigest); found || err != nil {
				return err
			}
		} else if t.Fingerprint != "" {
			if found, err := find(qTwin, t.Tenant, t.Fingerprint, t.Parent); found || err != nil {
				return err
			}
		}
		c := *t
		if err := tx.QueryRow(ctx, qNextBranch, t.Parent).Scan(&c.Branch); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, qInsertTurn, turnsql.Args(&c)...)
		if err != nil {
			return err
		}
		if created = tag.RowsAffected() == 1; created {
			t.Branch = c.Branch
		}
		return nil
	})
	return existing, created, err
}

// UpdateTurn writes a turn's mutable fields if it is still in from at fromTry.
func (s *Store) UpdateTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	tag, err := s.pool.Exec(ctx, qUpdateTurn, turnsql.UpdateArgs(t, from, fromTry)...)
	if err != nil {
		return false, fmt.Errorf("update turn: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteTurn marks a turn deleted and deletes its tries' records, in one
// transaction.
func (s *Store) DeleteTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	ok := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qMarkDeleted, ledger.UnixNano(t.UpdatedAt), t.ResponseID, string(from), fromTry)
		if err != nil || tag.RowsAffected() != 1 {
			return err
		}
		for _, id := range ledger.TryIdentities(t) {
			if _, err := tx.Exec(ctx, qDeleteTry, id); err != nil {
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
	var added bool
	err := s.pool.QueryRow(ctx, `WITH ins AS (`+qInsertOrphan+` RETURNING 1
		), sp AS (
			INSERT INTO tenant_spend (day, tenant, shard, charged) SELECT $10::bigint, $1::text, $11::smallint, $8::bigint
			WHERE $8::bigint <> 0 AND EXISTS (SELECT 1 FROM ins)
			ON CONFLICT (day, tenant, shard) DO UPDATE SET charged = tenant_spend.charged + excluded.charged
		) SELECT EXISTS (SELECT 1 FROM ins)`, append(turnsql.OrphanArgs(o), ledger.Day(o.At), shardOf(o.Conversation+o.UpstreamID))...).Scan(&added)
	if err != nil {
		return false, fmt.Errorf("add orphan: %w", err)
	}
	return added, nil
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
