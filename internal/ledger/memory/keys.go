package memory

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// copyKey returns a copy a caller may change without touching the store.
func copyKey(k *ledger.Key) *ledger.Key {
	c := *k
	c.Spec.Models = slices.Clone(k.Spec.Models)
	c.Spec.Metadata = maps.Clone(k.Spec.Metadata)
	c.Previous = slices.Clone(k.Previous)
	return &c
}

// owner is the key whose current or previous digest is d ("": none);
// s.mu is held.
func (s *Store) owner(d string) string {
	for id, k := range s.keys {
		if k.Digest == d || k.Prev(d) != nil {
			return id
		}
	}
	return ""
}

// digestsFree returns ErrKeyExists if k's digest or a previous one names
// another key; s.mu is held.
func (s *Store) digestsFree(k *ledger.Key) error {
	if o := s.owner(k.Digest); o != "" && o != k.ID {
		return ledger.ErrKeyExists
	}
	for _, p := range k.Previous {
		if o := s.owner(p.Digest); o != "" && o != k.ID {
			return ledger.ErrKeyExists
		}
	}
	return nil
}

// CreateKey stores a new key.
func (s *Store) CreateKey(_ context.Context, k *ledger.Key) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.keys[k.ID]; ok {
		return ledger.ErrKeyExists
	}
	if err := s.digestsFree(k); err != nil {
		return err
	}
	k.Version = 1
	s.keys[k.ID] = copyKey(k)
	return nil
}

// Key returns a key by id.
func (s *Store) Key(_ context.Context, id string) (*ledger.Key, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	k, ok := s.keys[id]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return copyKey(k), nil
}

// KeyByDigest returns the key whose current or previous digest is digest.
func (s *Store) KeyByDigest(_ context.Context, digest string) (*ledger.Key, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if id := s.owner(digest); id != "" {
		return copyKey(s.keys[id]), nil
	}
	return nil, ledger.ErrNotFound
}

// Keys lists the keys f selects, oldest first.
func (s *Store) Keys(_ context.Context, f ledger.KeyFilter) ([]*ledger.Key, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*ledger.Key{}
	for _, k := range s.keys {
		if f.Match(k) {
			out = append(out, copyKey(k))
		}
	}
	slices.SortFunc(out, func(a, b *ledger.Key) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// UpdateKey writes k over the stored key if it is still at k.Version
// and not revoked.
func (s *Store) UpdateKey(_ context.Context, k *ledger.Key) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	old, ok := s.keys[k.ID]
	switch {
	case !ok:
		return ledger.ErrNotFound
	case old.Revoked():
		return ledger.ErrKeyRevoked
	case old.Version != k.Version:
		return ledger.ErrConflict
	}
	if err := s.digestsFree(k); err != nil {
		return err
	}
	c := copyKey(k)
	c.Tenant, c.CreatedAt, c.RevokedAt, c.Version = old.Tenant, old.CreatedAt, old.RevokedAt, old.Version+1
	s.keys[k.ID] = c
	k.Version = c.Version
	return nil
}

// RevokeKey revokes key id, if at version (0: any), and returns it as
// revoked.
func (s *Store) RevokeKey(_ context.Context, id string, version int64, at time.Time) (*ledger.Key, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	k, ok := s.keys[id]
	switch {
	case !ok:
		return nil, ledger.ErrNotFound
	case k.Revoked():
		return nil, ledger.ErrKeyRevoked
	case version != 0 && k.Version != version:
		return nil, ledger.ErrConflict
	}
	k.RevokedAt, k.UpdatedAt, k.Previous = at, at, nil
	k.Version++
	return copyKey(k), nil
}

// KeySpend sums each key's charges over the days [fromDay, toDay].
func (s *Store) KeySpend(_ context.Context, fromDay, toDay int64) (map[string]int64, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := map[string]int64{}
	for d, m := range s.keySpend {
		if d < fromDay || d > toDay {
			continue
		}
		for k, v := range m {
			out[k] += v
		}
	}
	return out, nil
}

// chargeKey adds a charge to a key's day; s.mu is held.
func (s *Store) chargeKey(key string, nanoUSD int64, at time.Time) {
	if key == "" || nanoUSD == 0 {
		return
	}
	day := ledger.Day(at)
	if s.keySpend[day] == nil {
		s.keySpend[day] = map[string]int64{}
	}
	s.keySpend[day][key] += nanoUSD
}
