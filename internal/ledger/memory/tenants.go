package memory

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// copyTenant returns a copy a caller may change without touching the
// store.
func copyTenant(t *ledger.Tenant) *ledger.Tenant {
	c := *t
	c.Spec.Models = slices.Clone(t.Spec.Models)
	c.Spec.Metadata = maps.Clone(t.Spec.Metadata)
	return &c
}

// CreateTenant stores a new team at version 1.
func (s *Store) CreateTenant(_ context.Context, t *ledger.Tenant) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.teams[t.ID]; ok {
		return ledger.ErrTenantExists
	}
	t.Version = 1
	s.teams[t.ID] = copyTenant(t)
	return nil
}

// Tenant returns a team by id.
func (s *Store) Tenant(_ context.Context, id string) (*ledger.Tenant, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, ok := s.teams[id]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return copyTenant(t), nil
}

// Tenants lists every team, oldest first.
func (s *Store) Tenants(_ context.Context) ([]*ledger.Tenant, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*ledger.Tenant{}
	for _, t := range s.teams {
		out = append(out, copyTenant(t))
	}
	slices.SortFunc(out, func(a, b *ledger.Tenant) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// UpdateTenant writes t over the stored team if it is still at
// t.Version and not deleted.
func (s *Store) UpdateTenant(_ context.Context, t *ledger.Tenant) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	old, ok := s.teams[t.ID]
	switch {
	case !ok:
		return ledger.ErrNotFound
	case old.Deleted():
		return ledger.ErrTenantDeleted
	case old.Version != t.Version:
		return ledger.ErrConflict
	}
	c := copyTenant(t)
	c.CreatedAt, c.DeletedAt, c.Version = old.CreatedAt, old.DeletedAt, old.Version+1
	s.teams[t.ID] = c
	t.Version = c.Version
	return nil
}

// DeleteTenant marks team id deleted, if at version (0: any), and
// returns it as deleted.
func (s *Store) DeleteTenant(_ context.Context, id string, version int64, at time.Time) (*ledger.Tenant, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, ok := s.teams[id]
	switch {
	case !ok:
		return nil, ledger.ErrNotFound
	case t.Deleted():
		return nil, ledger.ErrTenantDeleted
	case version != 0 && t.Version != version:
		return nil, ledger.ErrConflict
	}
	t.DeletedAt, t.UpdatedAt = at, at
	t.Version++
	return copyTenant(t), nil
}
