package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	qRevokeKey   = turnsql.Dollar(keysql.Revoke)
	qKeyState    = turnsql.Dollar(keysql.State)
	qDropSecrets = turnsql.Dollar(keysql.DropSecrets)
	qAddSecret   = turnsql.Dollar(keysql.AddSecret)
	qKeySpend    = turnsql.Dollar(`SELECT key_id, SUM(charged)::bigint FROM key_spend WHERE day >= ? AND day <= ? GROUP BY key_id`)
)

// CreateKey stores a new key at version 1; the unique id and digests
// stand behind the look for a previous digest equal to the new one.
func (s *Store) CreateKey(ctx context.Context, k *ledger.Key) error {
	k.Version = 1
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := digestsFree(ctx, tx, k); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qInsertKey, keysql.Args(k)...); err != nil {
			return err
		}
		return putSecrets(ctx, tx, k)
	})
	if err != nil {
		return fmt.Errorf("create key %s: %w", k.ID, keyError(err))
	}
	return nil
}

// keyError is ErrKeyExists for a unique violation (an id or digest
// taken meanwhile), else err.
func keyError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		return ledger.ErrKeyExists
	}
	return err
}

// digestsFree returns ErrKeyExists if k's digest or a previous one names
// another key.
func digestsFree(ctx context.Context, tx pgx.Tx, k *ledger.Key) error {
	ds := []string{k.Digest}
	for _, p := range k.Previous {
		ds = append(ds, p.Digest)
	}
	for _, d := range ds {
		var n int
		if err := tx.QueryRow(ctx, qDigestTaken, d, k.ID, d, k.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ledger.ErrKeyExists
		}
	}
	return nil
}

// putSecrets makes key_secrets hold exactly k's previous secrets.
func putSecrets(ctx context.Context, tx pgx.Tx, k *ledger.Key) error {
	if _, err := tx.Exec(ctx, qDropSecrets, k.ID); err != nil {
		return err
	}
	for _, p := range k.Previous {
		if _, err := tx.Exec(ctx, qAddSecret, p.Digest, k.ID, ledger.UnixNano(p.Until)); err != nil {
			return err
		}
	}
	return nil
}

// refusal says why a conditional write of key id changed no row.
func refusal(ctx context.Context, tx pgx.Tx, id string) error {
	var revoked int64
	err := tx.QueryRow(ctx, qKeyState, id).Scan(&revoked)
	return keysql.Refusal(revoked, err, pgx.ErrNoRows)
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

// UpdateKey writes k over the stored key if it is still at k.Version
// and not revoked: the conditional UPDATE takes the row's lock, so a
// write that raced it finds the new version and changes nothing, and
// the previous secrets' rows change in the same transaction.
func (s *Store) UpdateKey(ctx context.Context, k *ledger.Key) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := digestsFree(ctx, tx, k); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, qUpdateKey, keysql.UpdateArgs(k)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return refusal(ctx, tx, k.ID)
		}
		return putSecrets(ctx, tx, k)
	})
	if err != nil {
		return fmt.Errorf("update key %s: %w", k.ID, keyError(err))
	}
	k.Version++
	return nil
}

// RevokeKey revokes key id, if at version (0: any), in one conditional
// write, and returns it as revoked.
func (s *Store) RevokeKey(ctx context.Context, id string, version int64, at time.Time) (*ledger.Key, error) {
	var out *ledger.Key
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qRevokeKey, keysql.RevokeArgs(id, version, at)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return refusal(ctx, tx, id)
		}
		if _, err := tx.Exec(ctx, qDropSecrets, id); err != nil {
			return err
		}
		out, err = keysql.Scan(tx.QueryRow(ctx, qKeyByID, id), pgx.ErrNoRows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoke key %s: %w", id, err)
	}
	return out, nil
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
