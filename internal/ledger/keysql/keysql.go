// Package keysql is the SQL of the virtual keys (docs/keys-and-teams.md) that the
// SQLite and PostgreSQL backends share: the tables, the statements
// (written with ? placeholders; turnsql.Dollar numbers them for
// PostgreSQL) and the row scanner. Times are Unix nanoseconds, 0 for
// none; a key's models, budget and metadata are one JSON column, so a
// new limit needs no migration.
package keysql

import (
	"errors"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// Schema creates the keys and key_spend tables; blob and integer name the
// backend's types for bytes and 64-bit integers. Only a digest of each
// secret is stored, never the secret.
func Schema(blob, integer string) string {
	r := strings.NewReplacer("BLOB", blob, "INTEGER", integer)
	return r.Replace(`CREATE TABLE keys (
		id          TEXT PRIMARY KEY,
		tenant      TEXT NOT NULL,
		name        TEXT NOT NULL,
		digest      TEXT NOT NULL UNIQUE,
		prefix      TEXT NOT NULL,
		prev_digest TEXT NOT NULL,
		prev_until  INTEGER NOT NULL,
		spec        BLOB NOT NULL,
		expires_at  INTEGER NOT NULL,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL,
		revoked_at  INTEGER NOT NULL
	);
	CREATE INDEX keys_by_prev_digest ON keys (prev_digest) WHERE prev_digest <> '';
	CREATE INDEX keys_by_tenant ON keys (tenant, created_at);
	CREATE TABLE key_spend (
		day     INTEGER NOT NULL,
		key_id  TEXT NOT NULL,
		charged INTEGER NOT NULL,
		PRIMARY KEY (day, key_id)
	);`)
}

// Versions is the migration that makes every change to a key one
// conditional write (docs/keys-and-teams.md): a version per key, bumped by every
// write; its previous secrets (each with its own end) as a JSON column
// read with the row, and in key_secrets, the index a lookup by digest
// uses. A previous secret the old columns held moves there; prev_digest
// and prev_until are no longer used (kept empty, so that a binary of the
// release before still reads the table).
func Versions(integer string) string {
	return strings.ReplaceAll(`ALTER TABLE keys ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
	ALTER TABLE keys ADD COLUMN previous TEXT NOT NULL DEFAULT '';
	CREATE TABLE key_secrets (
		digest      TEXT PRIMARY KEY,
		key_id      TEXT NOT NULL,
		valid_until INTEGER NOT NULL
	);
	CREATE INDEX key_secrets_by_key ON key_secrets (key_id);
	INSERT INTO key_secrets (digest, key_id, valid_until)
		SELECT prev_digest, id, prev_until FROM keys WHERE prev_digest <> '' AND revoked_at = 0;
	UPDATE keys SET previous = '[{"digest":"' || prev_digest || '","until":' || prev_until || '}]'
		WHERE prev_digest <> '' AND revoked_at = 0;
	UPDATE keys SET prev_digest = '', prev_until = 0 WHERE prev_digest <> '';`, "INTEGER", integer)
}

// Cols are a key row's columns, in Args and Scan order.
const Cols = `id, tenant, name, digest, prefix, previous, spec, expires_at, created_at, updated_at, revoked_at, version`

// The statements.
const (
	Insert = `INSERT INTO keys (` + Cols + `, prev_digest, prev_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', 0)`
	ByID   = `SELECT ` + Cols + ` FROM keys WHERE id = ?`
	// ByDigest finds a key by its current secret, else by a previous one.
	ByDigest = `SELECT ` + Cols + ` FROM keys WHERE digest = ? UNION ALL SELECT ` + Cols + ` FROM keys WHERE id = (SELECT key_id FROM key_secrets WHERE digest = ?)`
	// DigestTaken counts the keys other than id a digest names.
	DigestTaken = `SELECT (SELECT COUNT(*) FROM keys WHERE digest = ? AND id <> ?) + (SELECT COUNT(*) FROM key_secrets WHERE digest = ? AND key_id <> ?)`
	List        = `SELECT ` + Cols + ` FROM keys WHERE (? = '' OR tenant = ?) AND (? = '' OR name = ?) ORDER BY created_at, id`
	// Update is UpdateKey's conditional write: it changes the key only
	// at the version the write was based on, and never a revoked one.
	Update = `UPDATE keys SET name = ?, digest = ?, prefix = ?, previous = ?, spec = ?, expires_at = ?, updated_at = ?, version = version + 1
		WHERE id = ? AND version = ? AND revoked_at = 0`
	// Revoke is RevokeKey's conditional write: a key not revoked yet, at
	// the version given or at any.
	Revoke = `UPDATE keys SET revoked_at = ?, updated_at = ?, previous = '', version = version + 1
		WHERE id = ? AND revoked_at = 0 AND (? OR version = ?)`
	// State is what a refused conditional write reads to say why.
	State = `SELECT revoked_at FROM keys WHERE id = ?`
	// Secrets: a key's previous secrets are replaced whole.
	DropSecrets = `DELETE FROM key_secrets WHERE key_id = ?`
	AddSecret   = `INSERT INTO key_secrets (digest, key_id, valid_until) VALUES (?, ?, ?)`
	Spend       = `SELECT key_id, SUM(charged) FROM key_spend WHERE day >= ? AND day <= ? GROUP BY key_id`
)

// Args are k's values for Insert.
func Args(k *ledger.Key) []any {
	return []any{k.ID, k.Tenant, k.Name, k.Digest, k.Prefix, ledger.EncodePrevious(k.Previous), ledger.EncodeSpec(k.Spec),
		ledger.UnixNano(k.ExpiresAt), ledger.UnixNano(k.CreatedAt), ledger.UnixNano(k.UpdatedAt), ledger.UnixNano(k.RevokedAt), k.Version}
}

// UpdateArgs are k's values for Update.
func UpdateArgs(k *ledger.Key) []any {
	return []any{k.Name, k.Digest, k.Prefix, ledger.EncodePrevious(k.Previous), ledger.EncodeSpec(k.Spec),
		ledger.UnixNano(k.ExpiresAt), ledger.UnixNano(k.UpdatedAt), k.ID, k.Version}
}

// RevokeArgs are Revoke's values.
func RevokeArgs(id string, version int64, at time.Time) []any {
	return []any{ledger.UnixNano(at), ledger.UnixNano(at), id, version == 0, version}
}

// Refusal is why a conditional write changed no row, from what State
// read: ErrNotFound (noRows), ErrKeyRevoked, else ErrConflict.
func Refusal(revokedAt int64, err, noRows error) error {
	switch {
	case errors.Is(err, noRows):
		return ledger.ErrNotFound
	case err != nil:
		return err
	case revokedAt != 0:
		return ledger.ErrKeyRevoked
	}
	return ledger.ErrConflict
}

// ListArgs are f's values for List.
func ListArgs(f ledger.KeyFilter) []any { return []any{f.Tenant, f.Tenant, f.Name, f.Name} }

// Scan reads a key row; noRows is the driver's "no rows" error, which
// becomes ledger.ErrNotFound.
func Scan(row turnsql.Scanner, noRows error) (*ledger.Key, error) {
	var k ledger.Key
	var spec []byte
	var previous string
	var expires, created, updated, revoked int64
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.Digest, &k.Prefix, &previous, &spec, &expires, &created, &updated, &revoked, &k.Version); err != nil {
		if errors.Is(err, noRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	s, err := ledger.DecodeSpec(spec)
	if err != nil {
		return nil, err
	}
	k.Spec = s
	if k.Previous, err = ledger.DecodePrevious(previous); err != nil {
		return nil, err
	}
	k.ExpiresAt = ledger.FromUnixNano(expires)
	k.CreatedAt, k.UpdatedAt, k.RevokedAt = ledger.FromUnixNano(created), ledger.FromUnixNano(updated), ledger.FromUnixNano(revoked)
	return &k, nil
}

// Filter drops the keys of list f's Revoked excludes (List selects by
// tenant and name only).
func Filter(list []*ledger.Key, f ledger.KeyFilter) []*ledger.Key {
	out := list[:0]
	for _, k := range list {
		if f.Match(k) {
			out = append(out, k)
		}
	}
	if out == nil {
		out = []*ledger.Key{}
	}
	return out
}
