package memory

import (
	"cmp"
	"context"
	"slices"

	"github.com/oncegate/oncegate/internal/ledger"
)

func cloneTurn(t *ledger.Turn) *ledger.Turn {
	c := *t
	c.Input, c.Request, c.Response, c.Upstream = slices.Clone(t.Input), slices.Clone(t.Request), slices.Clone(t.Response), slices.Clone(t.Upstream)
	return &c
}

// BeginTurn writes a pending turn, numbered among its parent's
// continuations, unless its key or a keyless twin in flight has one.
func (s *Store) BeginTurn(_ context.Context, t *ledger.Turn) (*ledger.Turn, bool, error) {
	if err := s.lock(); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	var twin *ledger.Turn
	branch := 0
	for _, o := range s.turns {
		switch {
		case t.KeyDigest != "" && o.Tenant == t.Tenant && o.KeyDigest == t.KeyDigest:
			return cloneTurn(o), false, nil
		case t.KeyDigest == "" && t.Fingerprint != "" && isTwin(o, t) && (twin == nil || newer(o, twin)):
			twin = o
		}
		if t.Parent != "" && o.Parent == t.Parent {
			branch = max(branch, o.Branch+1)
		}
	}
	if twin != nil {
		return cloneTurn(twin), false, nil
	}
	t.Branch = branch
	s.turns[t.ResponseID] = cloneTurn(t)
	return nil, true, nil
}

// isTwin reports whether o is a keyless turn in flight that an arrival
// of t's body on t's parent continues.
func isTwin(o, t *ledger.Turn) bool {
	return o.Tenant == t.Tenant && o.KeyDigest == "" && o.Fingerprint == t.Fingerprint && o.Parent == t.Parent && !o.Deleted && o.State.InFlight()
}

// newer orders turns as the SQL backends do: by creation, then id.
func newer(a, b *ledger.Turn) bool {
	return a.CreatedAt.After(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ResponseID > b.ResponseID
}

// UpdateTurn writes a turn's mutable fields if it is still in from at fromTry.
func (s *Store) UpdateTurn(_ context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	if err := s.lock(); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	o, ok := s.turns[t.ResponseID]
	if !ok || o.State != from || o.Try != fromTry {
		return false, nil
	}
	c := cloneTurn(o)
	c.State, c.Try, c.RequestID, c.Ambiguous, c.Status, c.Deleted, c.UpdatedAt = t.State, t.Try, t.RequestID, t.Ambiguous, t.Status, t.Deleted, t.UpdatedAt
	c.Response, c.Upstream = slices.Clone(t.Response), slices.Clone(t.Upstream)
	s.turns[t.ResponseID] = c
	return true, nil
}

// Turn returns a tenant's turn.
func (s *Store) Turn(_ context.Context, tenant, responseID string) (*ledger.Turn, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if t, ok := s.turns[responseID]; ok && t.Tenant == tenant {
		return cloneTurn(t), nil
	}
	return nil, ledger.ErrNotFound
}

// TurnByFingerprint returns the newest undeleted keyless turn with a
// fingerprint and parent.
func (s *Store) TurnByFingerprint(_ context.Context, tenant, fingerprint, parent string) (*ledger.Turn, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var best *ledger.Turn
	for _, t := range s.turns {
		if t.Tenant == tenant && t.Fingerprint == fingerprint && t.Parent == parent && t.KeyDigest == "" && !t.Deleted &&
			(best == nil || newer(t, best)) {
			best = t
		}
	}
	if best == nil {
		return nil, ledger.ErrNotFound
	}
	return cloneTurn(best), nil
}

// DeleteTurn marks a turn deleted and deletes its tries' records.
func (s *Store) DeleteTurn(_ context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	if err := s.lock(); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	o, ok := s.turns[t.ResponseID]
	if !ok || o.State != from || o.Try != fromTry {
		return false, nil
	}
	c := cloneTurn(o)
	c.Deleted, c.UpdatedAt = true, t.UpdatedAt
	s.turns[t.ResponseID] = c
	for _, id := range ledger.TryIdentities(t) {
		if r, ok := s.records[id]; ok && r.State != ledger.InProgress {
			delete(s.records, id)
			delete(s.byID, r.RequestID)
		}
	}
	return true, nil
}

// ConversationTurns returns a conversation's turns by depth, then creation.
func (s *Store) ConversationTurns(_ context.Context, tenant, conversation string) ([]*ledger.Turn, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []*ledger.Turn
	for _, t := range s.turns {
		if t.Tenant == tenant && t.Conversation == conversation {
			out = append(out, cloneTurn(t))
		}
	}
	slices.SortFunc(out, func(a, b *ledger.Turn) int {
		return cmp.Or(cmp.Compare(a.Depth, b.Depth), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ResponseID, b.ResponseID))
	})
	return out, nil
}

// AddOrphan records an orphaned generation once.
func (s *Store) AddOrphan(_ context.Context, o *ledger.Orphan) (bool, error) {
	if err := s.lock(); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	for _, e := range s.orphans {
		if e.Tenant == o.Tenant && e.Conversation == o.Conversation && e.UpstreamID == o.UpstreamID {
			return false, nil
		}
	}
	c := *o
	s.orphans = append(s.orphans, &c)
	s.charge(o.Tenant, o.Cost, o.At)
	return true, nil
}

// Orphans lists a conversation's orphans.
func (s *Store) Orphans(_ context.Context, tenant, conversation string) ([]*ledger.Orphan, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []*ledger.Orphan
	for _, o := range s.orphans {
		if o.Tenant == tenant && o.Conversation == conversation {
			c := *o
			out = append(out, &c)
		}
	}
	return out, nil
}
