package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/keysql"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// CreateKey stores a new key at version 1. The writer runs one
// transaction at a time, so the look for a taken id or digest and the
// insert are one step.
func (s *Store) CreateKey(ctx context.Context, k *ledger.Key) error {
	k.Version = 1
	err := s.write(ctx, true, func(tx wtx) error {
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM keys WHERE id = ?`, k.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ledger.ErrKeyExists
		}
		if err := digestsFree(tx, k); err != nil {
			return err
		}
		if _, err := tx.Exec(keysql.Insert, keysql.Args(k)...); err != nil {
			return err
		}
		return putSecrets(tx, k)
	})
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return nil
}

// digestsFree returns ErrKeyExists if k's digest or a previous one names
// another key.
func digestsFree(tx wtx, k *ledger.Key) error {
	for _, d := range append([]string{k.Digest}, previousDigests(k)...) {
		var n int
		if err := tx.QueryRow(keysql.DigestTaken, d, k.ID, d, k.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ledger.ErrKeyExists
		}
	}
	return nil
}

func previousDigests(k *ledger.Key) []string {
	out := make([]string, len(k.Previous))
	for i, p := range k.Previous {
		out[i] = p.Digest
	}
	return out
}

// putSecrets makes key_secrets hold exactly k's previous secrets.
func putSecrets(tx wtx, k *ledger.Key) error {
	if _, err := tx.Exec(keysql.DropSecrets, k.ID); err != nil {
		return err
	}
	for _, p := range k.Previous {
		if _, err := tx.Exec(keysql.AddSecret, p.Digest, k.ID, ledger.UnixNano(p.Until)); err != nil {
			return err
		}
	}
	return nil
}

// refusal says why a conditional write of key id changed no row.
func refusal(tx wtx, id string) error {
	var revoked int64
	err := tx.QueryRow(keysql.State, id).Scan(&revoked)
	return keysql.Refusal(revoked, err, sql.ErrNoRows)
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

// UpdateKey writes k over the stored key if it is still at k.Version
// and not revoked. The writer runs one transaction at a time, so the
// look for a taken digest, the conditional write and the previous
// secrets' rows are one step; a refusal writes nothing.
func (s *Store) UpdateKey(ctx context.Context, k *ledger.Key) error {
	err := s.write(ctx, true, func(tx wtx) error {
		if err := digestsFree(tx, k); err != nil {
			return err
		}
		res, err := tx.Exec(keysql.Update, keysql.UpdateArgs(k)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return refusal(tx, k.ID)
		}
		return putSecrets(tx, k)
	})
	if err != nil {
		return fmt.Errorf("update key %s: %w", k.ID, err)
	}
	k.Version++
	return nil
}

// RevokeKey revokes key id, if at version (0: any), in one conditional
// write, and returns it as revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, version int64, at time.Time) (*ledger.Key, error) {
	var out *ledger.Key
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(keysql.Revoke, keysql.RevokeArgs(id, version, at)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return refusal(tx, id)
		}
		if _, err := tx.Exec(keysql.DropSecrets, id); err != nil {
			return err
		}
		out, err = keysql.Scan(tx.QueryRow(keysql.ByID, id), sql.ErrNoRows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoke key %s: %w", id, err)
	}
	return out, nil
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
