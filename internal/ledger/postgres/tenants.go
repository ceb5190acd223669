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
	qInsertTenant = turnsql.Dollar(keysql.InsertTenant)
	qTenantByID   = turnsql.Dollar(keysql.TenantByID)
	qListTenants  = turnsql.Dollar(keysql.ListTenants)
	qUpdateTenant = turnsql.Dollar(keysql.UpdateTenant)
	qDeleteTenant = turnsql.Dollar(keysql.DeleteTenant)
	qTenantState  = turnsql.Dollar(keysql.TenantState)
)

// CreateTenant stores a new team at version 1; the primary key refuses
// an id taken, meanwhile or before.
func (s *Store) CreateTenant(ctx context.Context, t *ledger.Tenant) error {
	t.Version = 1
	if _, err := s.pool.Exec(ctx, qInsertTenant, keysql.TenantArgs(t)...); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			err = ledger.ErrTenantExists
		}
		return fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	return nil
}

// Tenant returns a team by id.
func (s *Store) Tenant(ctx context.Context, id string) (*ledger.Tenant, error) {
	t, err := keysql.ScanTenant(s.pool.QueryRow(ctx, qTenantByID, id), pgx.ErrNoRows)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", id, err)
	}
	return t, nil
}

// Tenants lists every team, oldest first.
func (s *Store) Tenants(ctx context.Context) ([]*ledger.Tenant, error) {
	rows, err := s.pool.Query(ctx, qListTenants)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	list, err := turnsql.ScanAll(rows, func(r turnsql.Scanner) (*ledger.Tenant, error) { return keysql.ScanTenant(r, pgx.ErrNoRows) })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	if list == nil {
		list = []*ledger.Tenant{}
	}
	return list, nil
}

// tenantRefusal says why a conditional write of team id changed no row.
func tenantRefusal(ctx context.Context, tx pgx.Tx, id string) error {
	var deleted int64
	err := tx.QueryRow(ctx, qTenantState, id).Scan(&deleted)
	return keysql.TenantRefusal(deleted, err, pgx.ErrNoRows)
}

// UpdateTenant writes t over the stored team if it is still at
// t.Version and not deleted: the conditional UPDATE takes the row's
// lock, so a write that raced it finds the new version and changes
// nothing.
func (s *Store) UpdateTenant(ctx context.Context, t *ledger.Tenant) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qUpdateTenant, keysql.UpdateTenantArgs(t)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return tenantRefusal(ctx, tx, t.ID)
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qDeleteTenant, keysql.DeleteTenantArgs(id, version, at)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return tenantRefusal(ctx, tx, id)
		}
		out, err = keysql.ScanTenant(tx.QueryRow(ctx, qTenantByID, id), pgx.ErrNoRows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delete tenant %s: %w", id, err)
	}
	return out, nil
}
