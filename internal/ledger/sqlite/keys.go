package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/keysql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// CreateKey stores a new key. The writer runs one transaction at a time,
// so the look for a taken id or digest and the insert are one step.
func (s *Store) CreateKey(ctx context.Context, k *ledger.Key) error {
	err := s.write(ctx, true, func(tx wtx) error {
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM keys WHERE id = ? OR digest = ? OR prev_digest = ?`, k.ID, k.Digest, k.Digest).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ledger.ErrKeyExists
		}
		_, err := tx.Exec(keysql.Insert, keysql.Args(k)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// Key returns a key by id.
func (s *Store) Key(ctx context.Context, id string) (*ledger.Key, error) {
	k, err := keysql.Scan(s.r.QueryRowContext(ctx, keysql.ByID, id), sql.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", id, err)
	}
	return k, nil
}

// KeyByDigest returns the key whose current or previous digest is digest.
func (s *Store) KeyByDigest(ctx context.Context, digest string) (*ledger.Key, error) {
	k, err := keysql.Scan(s.r.QueryRowContext(ctx, keysql.ByDigest, digest, digest), sql.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("key by digest: %w", err)
	}
	return k, nil
}

// Keys lists the keys f selects, oldest first.
func (s *Store) Keys(ctx context.Context, f ledger.KeyFilter) ([]*ledger.Key, error) {
	rows, err := s.r.QueryContext(ctx, keysql.List, keysql.ListArgs(f)...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	list, err := turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Key, error) { return keysql.Scan(r, sql.ErrNoRows) })
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keysql.Filter(list, f), nil
}

// UpdateKey writes a stored key's mutable fields.
func (s *Store) UpdateKey(ctx context.Context, k *ledger.Key) error {
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(keysql.Update, keysql.UpdateArgs(k)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ledger.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update key %s: %w", k.ID, err)
	}
	return nil
}

// KeySpend sums each key's charges over the days [fromDay, toDay].
func (s *Store) KeySpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, keysql.Spend, fromDay, toDay)
	if err != nil {
		return nil, fmt.Errorf("key spend: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			return nil, fmt.Errorf("key spend: %w", err)
		}
		out[id] = v
	}
	return out, rows.Err()
}
