package keysql

import (
	"errors"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/turnsql"
)

// TenantSchema creates the tenants table of teams created at run time
// (docs/keys-and-teams.md, "Teams"); blob and integer name the backend's
// types for bytes and 64-bit integers. A team's models, budget, boundary
// and metadata are one JSON column, so a new limit needs no migration; a
// deleted team keeps its row (deleted_at), so that its id is not given
// out again and a write racing the deletion finds it deleted.
func TenantSchema(blob, integer string) string {
	r := strings.NewReplacer("BLOB", blob, "INTEGER", integer)
	return r.Replace(`CREATE TABLE tenants (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		spec       BLOB NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		deleted_at INTEGER NOT NULL,
		version    INTEGER NOT NULL
	)`)
}

// TenantCols are a team row's columns, in TenantArgs and ScanTenant
// order.
const TenantCols = `id, name, spec, created_at, updated_at, deleted_at, version`

// The team statements.
const (
	InsertTenant = `INSERT INTO tenants (` + TenantCols + `) VALUES (?, ?, ?, ?, ?, ?, ?)`
	TenantByID   = `SELECT ` + TenantCols + ` FROM tenants WHERE id = ?`
	ListTenants  = `SELECT ` + TenantCols + ` FROM tenants ORDER BY created_at, id`
	// UpdateTenant is UpdateTenant's conditional write: it changes the
	// team only at the version the write was based on, and never a
	// deleted one.
	UpdateTenant = `UPDATE tenants SET name = ?, spec = ?, updated_at = ?, version = version + 1
		WHERE id = ? AND version = ? AND deleted_at = 0`
	// DeleteTenant is DeleteTenant's conditional write: a team not
	// deleted yet, at the version given or at any.
	DeleteTenant = `UPDATE tenants SET deleted_at = ?, updated_at = ?, version = version + 1
		WHERE id = ? AND deleted_at = 0 AND (? OR version = ?)`
	// TenantState is what a refused conditional write reads to say why.
	TenantState = `SELECT deleted_at FROM tenants WHERE id = ?`
)

// TenantArgs are t's values for InsertTenant.
func TenantArgs(t *ledger.Tenant) []any {
	return []any{t.ID, t.Name, ledger.EncodeTenantSpec(t.Spec), ledger.UnixNano(t.CreatedAt), ledger.UnixNano(t.UpdatedAt),
		ledger.UnixNano(t.DeletedAt), t.Version}
}

// UpdateTenantArgs are t's values for UpdateTenant.
func UpdateTenantArgs(t *ledger.Tenant) []any {
	return []any{t.Name, ledger.EncodeTenantSpec(t.Spec), ledger.UnixNano(t.UpdatedAt), t.ID, t.Version}
}

// DeleteTenantArgs are DeleteTenant's values.
func DeleteTenantArgs(id string, version int64, at time.Time) []any {
	return []any{ledger.UnixNano(at), ledger.UnixNano(at), id, version == 0, version}
}

// TenantRefusal is why a conditional write of a team changed no row,
// from what TenantState read: ErrNotFound (noRows), ErrTenantDeleted,
// else ErrConflict.
func TenantRefusal(deletedAt int64, err, noRows error) error {
	switch {
	case errors.Is(err, noRows):
		return ledger.ErrNotFound
	case err != nil:
		return err
	case deletedAt != 0:
		return ledger.ErrTenantDeleted
	}
	return ledger.ErrConflict
}

// ScanTenant reads a team row; noRows is the driver's "no rows" error,
// which becomes ledger.ErrNotFound.
func ScanTenant(row turnsql.Scanner, noRows error) (*ledger.Tenant, error) {
	var t ledger.Tenant
	var spec []byte
	var created, updated, deleted int64
	if err := row.Scan(&t.ID, &t.Name, &spec, &created, &updated, &deleted, &t.Version); err != nil {
		if errors.Is(err, noRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	s, err := ledger.DecodeTenantSpec(spec)
	if err != nil {
		return nil, err
	}
	t.Spec = s
	t.CreatedAt, t.UpdatedAt, t.DeletedAt = ledger.FromUnixNano(created), ledger.FromUnixNano(updated), ledger.FromUnixNano(deleted)
	return &t, nil
}
