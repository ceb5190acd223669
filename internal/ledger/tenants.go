package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Tenant is a team: a tenant created at run time through the admin API
// rather than named in the configuration file (docs/keys-and-teams.md,
// "Teams"). It has no key of its own: virtual keys are issued for it, and
// it bounds them as a file tenant bounds its keys.
type Tenant struct {
	ID   string
	Name string
	// Spec is what the team may do: models, budget, boundary, metadata.
	Spec      TenantSpec
	CreatedAt time.Time
	UpdatedAt time.Time
	DeletedAt time.Time // zero: not deleted
	// Version counts the team's writes: 1 when created, one more at each
	// UpdateTenant or DeleteTenant. A write names the version it was
	// based on, and is refused if another came in between (ErrConflict).
	Version int64
}

// TenantSpec is a team's models, limits, boundary and metadata, as the
// admin API sets them. It is stored as JSON, so adding a limit needs no
// migration.
type TenantSpec struct {
	// Models are the model aliases the team's keys may use (none: all).
	Models []string `json:"models,omitempty"`
	// Budget are the team's limits, over all its keys, with the keys'
	// vocabulary (zero: no limit).
	Budget          KeyBudget         `json:"budget"`
	MaxDataBoundary string            `json:"max_data_boundary,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

// Deleted reports whether the team was deleted.
func (t *Tenant) Deleted() bool { return !t.DeletedAt.IsZero() }

// EncodeTenantSpec is how the backends store a team's spec.
func EncodeTenantSpec(s TenantSpec) []byte {
	b, _ := json.Marshal(s) // strings, numbers and a map of strings: cannot fail
	return b
}

// DecodeTenantSpec reads a spec EncodeTenantSpec stored.
func DecodeTenantSpec(b []byte) (TenantSpec, error) {
	var s TenantSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return TenantSpec{}, errors.Join(errors.New("ledger: tenant spec"), err)
	}
	return s, nil
}

// Errors of the team writes (besides ErrConflict and ErrNotFound).
var (
	// ErrTenantExists: a team with that id is stored already (deleted
	// or not: a deleted team's id is not given out again).
	ErrTenantExists = errors.New("ledger: tenant exists")
	// ErrTenantDeleted: the team is deleted, which no write undoes; this
	// one wrote nothing.
	ErrTenantDeleted = errors.New("ledger: tenant deleted")
)

// TenantStore keeps the teams. As for keys, every change to a stored
// team is one conditional write on its version, so two writers never
// lose each other's change, and a deletion is final.
type TenantStore interface {
	// CreateTenant stores a new team at version 1 and sets t.Version
	// (ErrTenantExists if its id is taken).
	CreateTenant(ctx context.Context, t *Tenant) error
	// Tenant returns a team by id, deleted or not, or ErrNotFound.
	Tenant(ctx context.Context, id string) (*Tenant, error)
	// Tenants lists every team, deleted ones too, oldest first.
	Tenants(ctx context.Context) ([]*Tenant, error)
	// UpdateTenant writes t's name, spec and update time over the stored
	// team t.ID if it is still at t.Version and not deleted, and then
	// sets t.Version to the new version — one conditional write:
	// ErrNotFound if there is no such team, ErrTenantDeleted if it is
	// deleted, ErrConflict if it is at another version; nothing is
	// written then.
	UpdateTenant(ctx context.Context, t *Tenant) error
	// DeleteTenant marks team id deleted at at if it is at version (0:
	// at any) — one conditional write — and returns it as deleted.
	// ErrNotFound if there is no such team, ErrTenantDeleted if it was
	// deleted already (the first deletion's time stays), ErrConflict if
	// it is at another version than a non-zero version.
	DeleteTenant(ctx context.Context, id string, version int64, at time.Time) (*Tenant, error)
}
