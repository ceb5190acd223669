package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Key is a virtual key issued at run time (docs/keys.md). Its secret is
// never stored: Digest is an HMAC-SHA256 of it keyed by the deployment's
// secret, so a copy of the store does not give working keys.
type Key struct {
	ID     string
	Tenant string
	Name   string
	// Digest is the hex HMAC-SHA256 of the secret; Prefix its first
	// characters, to tell keys apart in lists.
	Digest string
	Prefix string
	// PrevDigest is the secret a rotation replaced, still valid until
	// PrevUntil (the rotation's grace); empty when none.
	PrevDigest string
	PrevUntil  time.Time
	// Spec is what narrows the tenant: models, budget, boundary, metadata.
	Spec      KeySpec
	ExpiresAt time.Time // zero: never
	CreatedAt time.Time
	UpdatedAt time.Time
	RevokedAt time.Time // zero: not revoked
}

// KeySpec is what a key may do, as the admin API sets it. It is stored
// as JSON, so adding a limit needs no migration.
type KeySpec struct {
	Models          []string          `json:"models,omitempty"`
	Budget          KeyBudget         `json:"budget"`
	MaxDataBoundary string            `json:"max_data_boundary,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

// KeyBudget are a key's limits; zero values mean no limit of the key's
// own (the tenant's still hold).
type KeyBudget struct {
	RequestsPerMinute int     `json:"requests_per_minute,omitempty"`
	TokensPerMinute   int64   `json:"tokens_per_minute,omitempty"`
	CostUSDPerDay     float64 `json:"cost_usd_per_day,omitempty"`
	CostUSDPerMonth   float64 `json:"cost_usd_per_month,omitempty"`
	MaxConcurrent     int     `json:"max_concurrent,omitempty"`
}

// Revoked reports whether the key was revoked.
func (k *Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// EncodeSpec is how the backends store a key's spec.
func EncodeSpec(s KeySpec) []byte {
	b, _ := json.Marshal(s) // strings, numbers and a map of strings: cannot fail
	return b
}

// DecodeSpec reads a spec EncodeSpec stored.
func DecodeSpec(b []byte) (KeySpec, error) {
	var s KeySpec
	if err := json.Unmarshal(b, &s); err != nil {
		return KeySpec{}, errors.Join(errors.New("ledger: key spec"), err)
	}
	return s, nil
}

// KeyFilter selects keys to list; zero fields select all.
type KeyFilter struct {
	Tenant string
	Name   string
	// Revoked, when set, keeps only revoked keys (true) or only live ones.
	Revoked *bool
}

// Match reports whether k passes the filter.
func (f KeyFilter) Match(k *Key) bool {
	return (f.Tenant == "" || k.Tenant == f.Tenant) && (f.Name == "" || k.Name == f.Name) &&
		(f.Revoked == nil || *f.Revoked == k.Revoked())
}

// ErrKeyExists: a key with that id or digest is stored already.
var ErrKeyExists = errors.New("ledger: key exists")

// KeyStore keeps virtual keys and what each was charged per UTC day.
type KeyStore interface {
	// CreateKey stores a new key (ErrKeyExists if its id or digest is
	// taken).
	CreateKey(ctx context.Context, k *Key) error
	// Key returns a key by id, or ErrNotFound.
	Key(ctx context.Context, id string) (*Key, error)
	// KeyByDigest returns the key whose Digest or PrevDigest is digest,
	// or ErrNotFound; the caller checks PrevUntil, expiry and revocation.
	KeyByDigest(ctx context.Context, digest string) (*Key, error)
	// Keys lists the keys f selects, oldest first.
	Keys(ctx context.Context, f KeyFilter) ([]*Key, error)
	// UpdateKey writes every field of the stored key k.ID but its id,
	// tenant and creation time; ErrNotFound if there is none.
	UpdateKey(ctx context.Context, k *Key) error
	// KeySpend returns what each key was charged over the UTC days
	// [fromDay, toDay], in nano-USD: the Charge of every Finish and
	// StoredReceipt naming it.
	KeySpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error)
}

// MonthStart is the UTC day (see Day) the month of t begins on.
func MonthStart(t time.Time) int64 {
	t = t.UTC()
	return Day(time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC))
}
