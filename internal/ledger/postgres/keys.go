package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/keysql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

var (
	qInsertKey   = turnsql.Dollar(keysql.Insert)
	qKeyByID     = turnsql.Dollar(keysql.ByID)
	qKeyByDigest = turnsql.Dollar(keysql.ByDigest)
	qDigestTaken = turnsql.Dollar(keysql.DigestTaken)
	qListKeys    = turnsql.Dollar(keysql.List)
	qUpdateKey   = turnsql.Dollar(keysql.Update)
	qKeySpend    = turnsql.Dollar(`SELECT key_id, SUM(charged)::bigint FROM key_spend WHERE day >= ? AND day <= ? GROUP BY key_id`)
)

// CreateKey stores a new key; the unique id and digest stand behind the
// look for a previous digest equal to the new one.
func (s *Store) CreateKey(ctx context.Context, k *ledger.Key) error {
	var n int
	if err := s.pool.QueryRow(ctx, qDigestTaken, k.Digest, k.Digest).Scan(&n); err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	if n > 0 {
		return fmt.Errorf("create key %s: %w", k.ID, ledger.ErrKeyExists)
	}
	if _, err := s.pool.Exec(ctx, qInsertKey, keysql.Args(k)...); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			return fmt.Errorf("create key %s: %w", k.ID, ledger.ErrKeyExists)
		}
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// Key returns a key by id.
func (s *Store) Key(ctx context.Context, id string) (*ledger.Key, error) {
	k, err := keysql.Scan(s.pool.QueryRow(ctx, qKeyByID, id), pgx.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", id, err)
	}
	return k, nil
}

// KeyByDigest returns the key whose current or previous digest is digest.
func (s *Store) KeyByDigest(ctx context.Context, digest string) (*ledger.Key, error) {
	k, err := keysql.Scan(s.pool.QueryRow(ctx, qKeyByDigest, digest, digest), pgx.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("key by digest: %w", err)
	}
	return k, nil
}

// Keys lists the keys f selects, oldest first.
func (s *Store) Keys(ctx context.Context, f ledger.KeyFilter) ([]*ledger.Key, error) {
	rows, err := s.pool.Query(ctx, qListKeys, keysql.ListArgs(f)...)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	defer rows.Close()
	list, err := turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Key, error) { return keysql.Scan(r, pgx.ErrNoRows) })
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return keysql.Filter(list, f), nil
}

// UpdateKey writes a stored key's mutable fields.
func (s *Store) UpdateKey(ctx context.Context, k *ledger.Key) error {
	tag, err := s.pool.Exec(ctx, qUpdateKey, keysql.UpdateArgs(k)...)
	if err != nil {
		return fmt.Errorf("update key %s: %w", k.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update key %s: %w", k.ID, ledger.ErrNotFound)
	}
	return nil
}

// KeySpend sums each key's charges over the days [fromDay, toDay].
func (s *Store) KeySpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, qKeySpend, fromDay, toDay)
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
