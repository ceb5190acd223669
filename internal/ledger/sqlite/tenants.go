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

// CreateTenant stores a new team at version 1. The writer runs one
// transaction at a time, so the look for a taken id and the insert are
// one step.
func (s *Store) CreateTenant(ctx context.Context, t *ledger.Tenant) error {
	t.Version = 1
	err := s.write(ctx, true, func(tx wtx) error {
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM tenants WHERE id = ?`, t.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ledger.ErrTenantExists
		}
		_, err := tx.Exec(keysql.InsertTenant, keysql.TenantArgs(t)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	return nil
}

// Tenant returns a team by id.
func (s *Store) Tenant(ctx context.Context, id string) (*ledger.Tenant, error) {
	t, err := keysql.ScanTenant(s.r.QueryRowContext(ctx, keysql.TenantByID, id), sql.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", id, err)
	}
	return t, nil
}

// Tenants lists every team, oldest first.
func (s *Store) Tenants(ctx context.Context) ([]*ledger.Tenant, error) {
	rows, err := s.r.QueryContext(ctx, keysql.ListTenants)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	list, err := turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Tenant, error) { return keysql.ScanTenant(r, sql.ErrNoRows) })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	if list == nil {
		list = []*ledger.Tenant{}
	}
	return list, nil
}

// tenantRefusal says why a conditional write of team id changed no row.
func tenantRefusal(tx wtx, id string) error {
	var deleted int64
	err := tx.QueryRow(keysql.TenantState, id).Scan(&deleted)
	return keysql.TenantRefusal(deleted, err, sql.ErrNoRows)
}

// UpdateTenant writes t over the stored team if it is still at
// t.Version and not deleted, in one conditional write.
func (s *Store) UpdateTenant(ctx context.Context, t *ledger.Tenant) error {
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(keysql.UpdateTenant, keysql.UpdateTenantArgs(t)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return tenantRefusal(tx, t.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update tenant %s: %w", t.ID, err)
	}
	t.Version++
	return nil
}

// DeleteTenant marks team id deleted, if at version (0: any), in one
// conditional write, and returns it as deleted.
func (s *Store) DeleteTenant(ctx context.Context, id string, version int64, at time.Time) (*ledger.Tenant, error) {
	var out *ledger.Tenant
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(keysql.DeleteTenant, keysql.DeleteTenantArgs(id, version, at)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return tenantRefusal(tx, id)
		}
		out, err = keysql.ScanTenant(tx.QueryRow(keysql.TenantByID, id), sql.ErrNoRows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delete tenant %s: %w", id, err)
	}
	return out, nil
}

// CreateTenant stores a new team, once the database has applied the
// log's records before the call.
func (s *LogStore) CreateTenant(ctx context.Context, t *ledger.Tenant) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.CreateTenant(ctx, t)
}

// Tenant returns a team by id, once the database has applied the log's
// records before the call.
func (s *LogStore) Tenant(ctx context.Context, id string) (*ledger.Tenant, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Tenant(ctx, id)
}

// Tenants lists every team, once the database has applied the log's
// records before the call.
func (s *LogStore) Tenants(ctx context.Context) ([]*ledger.Tenant, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Tenants(ctx)
}

// UpdateTenant writes a team if it is still at t.Version, once the
// database has applied the log's records before the call: the
// database's one writer makes the conditional write and its check one
// transaction.
func (s *LogStore) UpdateTenant(ctx context.Context, t *ledger.Tenant) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.UpdateTenant(ctx, t)
}

// DeleteTenant marks a team deleted in one conditional write, once the
// database has applied the log's records before the call.
func (s *LogStore) DeleteTenant(ctx context.Context, id string, version int64, at time.Time) (*ledger.Tenant, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.DeleteTenant(ctx, id, version, at)
}
