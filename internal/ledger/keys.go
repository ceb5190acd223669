package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Key is a virtual key issued at run time (docs/keys-and-teams.md). Its secret is
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
	// Previous are the secrets rotations replaced that still work, each
	// until its own end (its rotation's grace), oldest first.
	Previous []PrevSecret
	// Spec is what narrows the tenant: models, budget, boundary, metadata.
	Spec      KeySpec
	ExpiresAt time.Time // zero: never
	CreatedAt time.Time
	UpdatedAt time.Time
	RevokedAt time.Time // zero: not revoked
	// Version counts the key's writes: 1 when created, one more at each
	// UpdateKey or RevokeKey. A write names the version it was based on,
	// and is refused if another came in between (ErrConflict).
	Version int64
}

// PrevSecret is a secret a rotation replaced: its digest, its display
// prefix, and when it stops working.
type PrevSecret struct {
	Digest string
	Prefix string
	Until  time.Time
}

// MaxPrevious bounds a key's previous secrets still in their grace: a
// rotation with a grace beyond them is refused, not made to cut another
// grace short.
const MaxPrevious = 16

// Prev returns the previous secret whose digest is digest, or nil.
func (k *Key) Prev(digest string) *PrevSecret {
	for i := range k.Previous {
		if k.Previous[i].Digest == digest {
			return &k.Previous[i]
		}
	}
	return nil
}

// LivePrevious returns the previous secrets that still work at now.
func (k *Key) LivePrevious(now time.Time) []PrevSecret {
	var out []PrevSecret
	for _, p := range k.Previous {
		if now.Before(p.Until) {
			out = append(out, p)
		}
	}
	return out
}

// KeySpec is what a key may do, as the admin API sets it. It is stored
// as JSON, so adding a limit needs no migration.
type KeySpec struct {
	Models          []string          `json:"models,omitempty"`
	Budget          KeyBudget         `json:"budget"`
	MaxDataBoundary string            `json:"max_data_boundary,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	// DropParams, when set, is drop_params for the key's requests, over
	// its tenant's (docs/keys-and-teams.md).
	DropParams *bool `json:"drop_params,omitempty"`
	// KeylessJoin, when not nil, is the key's own keyless_join: false,
	// identical keyless requests made with it never share a generation
	// (docs/identity.md).
	KeylessJoin *bool `json:"keyless_join,omitempty"`
}

// KeyBudget are a key's limits; zero values mean no limit of the key's
// own (the tenant's still hold).
type KeyBudget struct {
	RequestsPerMinute int     `json:"requests_per_minute,omitempty"`
	TokensPerMinute   int64   `json:"tokens_per_minute,omitempty"`
	CostUSDPerDay     float64 `json:"cost_usd_per_day,omitempty"`
	CostUSDPerMonth   float64 `json:"cost_usd_per_month,omitempty"`
	// CostUSDTotal caps what the key is charged over its whole life;
	// deleting old receipts frees none of it.
	CostUSDTotal  float64 `json:"cost_usd_total,omitempty"`
	MaxConcurrent int     `json:"max_concurrent,omitempty"`
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

// prevJSON is how EncodePrevious stores a previous secret.
type prevJSON struct {
	Digest string `json:"digest"`
	Prefix string `json:"prefix,omitempty"`
	Until  int64  `json:"until"` // Unix nanoseconds
}

// EncodePrevious is how the backends store a key's previous secrets
// beside its row ("" for none), so that a read of the row has them.
func EncodePrevious(ps []PrevSecret) string {
	if len(ps) == 0 {
		return ""
	}
	out := make([]prevJSON, len(ps))
	for i, p := range ps {
		out[i] = prevJSON{Digest: p.Digest, Prefix: p.Prefix, Until: UnixNano(p.Until)}
	}
	b, _ := json.Marshal(out) // strings and integers: cannot fail
	return string(b)
}

// DecodePrevious reads what EncodePrevious stored.
func DecodePrevious(s string) ([]PrevSecret, error) {
	if s == "" {
		return nil, nil
	}
	var in []prevJSON
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, errors.Join(errors.New("ledger: key's previous secrets"), err)
	}
	out := make([]PrevSecret, len(in))
	for i, p := range in {
		out[i] = PrevSecret{Digest: p.Digest, Prefix: p.Prefix, Until: FromUnixNano(p.Until)}
	}
	return out, nil
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

// Errors of the key writes.
var (
	// ErrKeyExists: a key with that id or digest is stored already.
	ErrKeyExists = errors.New("ledger: key exists")
	// ErrConflict: the key (or team) is no longer at the version the
	// write was based on — another write came in between, and this one
	// wrote nothing.
	ErrConflict = errors.New("ledger: changed since it was read")
	// ErrKeyRevoked: the key is revoked, which no write undoes; this one
	// wrote nothing.
	ErrKeyRevoked = errors.New("ledger: key revoked")
)

// KeyStore keeps virtual keys and what each was charged per UTC day.
// Every change to a stored key is one conditional write on its version,
// so two writers never lose each other's change, and a revocation is
// final (docs/keys-and-teams.md).
type KeyStore interface {
	// CreateKey stores a new key at version 1, and sets k.Version
	// (ErrKeyExists if its id, or its digest or a previous one, is
	// taken).
	CreateKey(ctx context.Context, k *Key) error
	// Key returns a key by id, or ErrNotFound.
	Key(ctx context.Context, id string) (*Key, error)
	// KeyByDigest returns the key whose Digest, or one of whose Previous
	// digests, is digest, or ErrNotFound; the caller checks a previous
	// secret's end, expiry and revocation.
	KeyByDigest(ctx context.Context, digest string) (*Key, error)
	// Keys lists the keys f selects, oldest first.
	Keys(ctx context.Context, f KeyFilter) ([]*Key, error)
	// UpdateKey writes k over the stored key k.ID — its name, secret,
	// previous secrets (exactly k.Previous), spec, expiry and update
	// time; never its tenant, creation or revocation — if the stored key
	// is still at k.Version and not revoked, and then sets k.Version to
	// the new version. It is one conditional write: ErrNotFound if there
	// is no such key, ErrKeyRevoked if it is revoked, ErrConflict if it
	// is at another version, ErrKeyExists if k's digest or a previous
	// one is another key's; nothing is written then.
	UpdateKey(ctx context.Context, k *Key) error
	// RevokeKey revokes key id at at, and forgets its previous secrets,
	// if it is at version (0: at any) — one conditional write — and
	// returns it as revoked. ErrNotFound if there is no such key,
	// ErrKeyRevoked if it was revoked already (a revocation is final:
	// the first one's time stays), ErrConflict if it is at another
	// version than a non-zero version.
	RevokeKey(ctx context.Context, id string, version int64, at time.Time) (*Key, error)
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
