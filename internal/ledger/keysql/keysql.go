// Package keysql is the SQL of the virtual keys (docs/keys.md) that the
// SQLite and PostgreSQL backends share: the tables, the statements
// (written with ? placeholders; turnsql.Dollar numbers them for
// PostgreSQL) and the row scanner. Times are Unix nanoseconds, 0 for
// none; a key's models, budget and metadata are one JSON column, so a
// new limit needs no migration.
package keysql

import (
	"errors"
	"strings"

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

// Cols are a key row's columns, in Args and Scan order.
const Cols = `id, tenant, name, digest, prefix, prev_digest, prev_until, spec, expires_at, created_at, updated_at, revoked_at`

// The statements.
const (
	Insert   = `INSERT INTO keys (` + Cols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	ByID     = `SELECT ` + Cols + ` FROM keys WHERE id = ?`
	ByDigest = `SELECT ` + Cols + ` FROM keys WHERE digest = ? UNION ALL SELECT ` + Cols + ` FROM keys WHERE prev_digest = ? AND prev_digest <> ''`
	// DigestTaken counts the keys an issued digest would collide with.
	DigestTaken = `SELECT COUNT(*) FROM keys WHERE digest = ? OR prev_digest = ?`
	List        = `SELECT ` + Cols + ` FROM keys WHERE (? = '' OR tenant = ?) AND (? = '' OR name = ?) ORDER BY created_at, id`
	Update      = `UPDATE keys SET name = ?, digest = ?, prefix = ?, prev_digest = ?, prev_until = ?, spec = ?, expires_at = ?, updated_at = ?, revoked_at = ? WHERE id = ?`
	Spend       = `SELECT key_id, SUM(charged) FROM key_spend WHERE day >= ? AND day <= ? GROUP BY key_id`
)

// Args are k's values for Insert.
func Args(k *ledger.Key) []any {
	return []any{k.ID, k.Tenant, k.Name, k.Digest, k.Prefix, k.PrevDigest, ledger.UnixNano(k.PrevUntil), ledger.EncodeSpec(k.Spec),
		ledger.UnixNano(k.ExpiresAt), ledger.UnixNano(k.CreatedAt), ledger.UnixNano(k.UpdatedAt), ledger.UnixNano(k.RevokedAt)}
}

// UpdateArgs are k's values for Update.
func UpdateArgs(k *ledger.Key) []any {
	return []any{k.Name, k.Digest, k.Prefix, k.PrevDigest, ledger.UnixNano(k.PrevUntil), ledger.EncodeSpec(k.Spec),
		ledger.UnixNano(k.ExpiresAt), ledger.UnixNano(k.UpdatedAt), ledger.UnixNano(k.RevokedAt), k.ID}
}

// ListArgs are f's values for List.
func ListArgs(f ledger.KeyFilter) []any { return []any{f.Tenant, f.Tenant, f.Name, f.Name} }

// Scan reads a key row; noRows is the driver's "no rows" error, which
// becomes ledger.ErrNotFound.
func Scan(row turnsql.Scanner, noRows error) (*ledger.Key, error) {
	var k ledger.Key
	var spec []byte
	var prevUntil, expires, created, updated, revoked int64
	if err := row.Scan(&k.ID, &k.Tenant, &k.Name, &k.Digest, &k.Prefix, &k.PrevDigest, &prevUntil, &spec, &expires, &created, &updated, &revoked); err != nil {
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
	k.PrevUntil, k.ExpiresAt = ledger.FromUnixNano(prevUntil), ledger.FromUnixNano(expires)
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
