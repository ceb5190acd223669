package sqlite

import (
	"context"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// The LogStore's other calls: each waits until the database has applied
// everything appended to the log before it (barrier), then runs against
// the database.

// Get returns the record for identity, once the database has applied the log's records before the call.
func (s *LogStore) Get(ctx context.Context, identity string) (*ledger.Record, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Get(ctx, identity)
}

// Lapsed lists the in-progress records whose lease lapsed before at, once the database has applied the log's records before the call.
func (s *LogStore) Lapsed(ctx context.Context, at time.Time) ([]ledger.Unfinished, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Lapsed(ctx, at)
}

// Unfinished lists the in-progress records with their events, once the database has applied the log's records before the call.
func (s *LogStore) Unfinished(ctx context.Context) ([]ledger.Unfinished, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Unfinished(ctx)
}

// Events returns a request's events in order, once the database has applied the log's records before the call.
func (s *LogStore) Events(ctx context.Context, requestID string) ([]ledger.Event, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Events(ctx, requestID)
}

// StaleEvents returns the writes fenced off for a request, once the database has applied the log's records before the call.
func (s *LogStore) StaleEvents(ctx context.Context, requestID string) ([]ledger.Event, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.StaleEvents(ctx, requestID)
}

// Receipt returns a tenant's receipt, once the database has applied the log's records before the call.
func (s *LogStore) Receipt(ctx context.Context, tenant, requestID string) ([]byte, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Receipt(ctx, tenant, requestID)
}

// Receipts lists a tenant's receipts newest first, once the database has applied the log's records before the call.
func (s *LogStore) Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Receipts(ctx, tenant, limit, after)
}

// Spend returns what each tenant was charged on a UTC day, once the database has applied the log's records before the call.
func (s *LogStore) Spend(ctx context.Context, day int64) (map[string]int64, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Spend(ctx, day)
}

// TenantSpend sums each tenant's charges over the UTC days [fromDay, toDay], once the database has applied the log's records before the call.
func (s *LogStore) TenantSpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.TenantSpend(ctx, fromDay, toDay)
}

// Secret returns the fingerprint secret, generating it once, once the database has applied the log's records before the call.
func (s *LogStore) Secret(ctx context.Context) ([]byte, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Secret(ctx)
}

// State returns what SaveState last kept under name, once the database has applied the log's records before the call.
func (s *LogStore) State(ctx context.Context, name string) ([]byte, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.State(ctx, name)
}

// Expire deletes records finished before cutoff, once the database has
// applied the log's records before the call (deleting); the identities the database
// may hold are counted again once a quarter of them are gone.
func (s *LogStore) Expire(ctx context.Context, cutoff time.Time) (int, error) {
	n, err := s.deleting(ctx, func() (int, error) { return s.db.Expire(ctx, cutoff) })
	if err != nil {
		return n, err
	}
	s.forget(n)
	if err := s.maybeRebuildKnown(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// BeginTurn writes a turn unless it exists, once the database has applied the log's records before the call.
func (s *LogStore) BeginTurn(ctx context.Context, t *ledger.Turn) (*ledger.Turn, bool, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, false, err
	}
	return s.db.BeginTurn(ctx, t)
}

// UpdateTurn writes a turn's state if it did not move on, once the database has applied the log's records before the call.
func (s *LogStore) UpdateTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	if err := s.barrier(ctx); err != nil {
		return false, err
	}
	return s.db.UpdateTurn(ctx, t, from, fromTry)
}

// Turn returns a tenant's turn by response id, once the database has applied the log's records before the call.
func (s *LogStore) Turn(ctx context.Context, tenant, responseID string) (*ledger.Turn, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Turn(ctx, tenant, responseID)
}

// TurnByFingerprint returns the newest undeleted keyless turn with that fingerprint and parent, once the database has applied the log's records before the call.
func (s *LogStore) TurnByFingerprint(ctx context.Context, tenant, fingerprint, parent string) (*ledger.Turn, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.TurnByFingerprint(ctx, tenant, fingerprint, parent)
}

// DeleteTurn marks a turn deleted with its tries' records, once the
// database has applied the log's records before the call (deleting).
func (s *LogStore) DeleteTurn(ctx context.Context, t *ledger.Turn, from ledger.TurnState, fromTry int) (bool, error) {
	ok := false
	_, err := s.deleting(ctx, func() (int, error) {
		var err error
		ok, err = s.db.DeleteTurn(ctx, t, from, fromTry)
		return 0, err
	})
	if ok {
		s.forget(len(ledger.TryIdentities(t))) // at most: counts a rebuild
	}
	return ok, err
}

// ConversationTurns returns a conversation's turns, once the database has applied the log's records before the call.
func (s *LogStore) ConversationTurns(ctx context.Context, tenant, conversation string) ([]*ledger.Turn, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.ConversationTurns(ctx, tenant, conversation)
}

// AddOrphan records an orphaned generation once, once the database has applied the log's records before the call.
func (s *LogStore) AddOrphan(ctx context.Context, o *ledger.Orphan) (bool, error) {
	if err := s.barrier(ctx); err != nil {
		return false, err
	}
	return s.db.AddOrphan(ctx, o)
}

// Orphans lists a conversation's orphans, once the database has applied the log's records before the call.
func (s *LogStore) Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Orphans(ctx, tenant, conversation)
}

// Key returns a key by id, once the database has applied the log's records before the call.
func (s *LogStore) Key(ctx context.Context, id string) (*ledger.Key, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Key(ctx, id)
}

// KeyByDigest returns the key a digest names, once the database has applied the log's records before the call.
func (s *LogStore) KeyByDigest(ctx context.Context, digest string) (*ledger.Key, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.KeyByDigest(ctx, digest)
}

// Keys lists the keys f selects, once the database has applied the log's records before the call.
func (s *LogStore) Keys(ctx context.Context, f ledger.KeyFilter) ([]*ledger.Key, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.Keys(ctx, f)
}

// KeySpend returns what each key was charged over the days, once the database has applied the log's records before the call.
func (s *LogStore) KeySpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.KeySpend(ctx, fromDay, toDay)
}

// PutReceipt stores a receipt, and charges it, unless one exists, once the database has applied the log's records before the call.
func (s *LogStore) PutReceipt(ctx context.Context, r *ledger.StoredReceipt) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.PutReceipt(ctx, r)
}

// AddDedup adds to a receipt's dedup counts, once the database has applied the log's records before the call.
func (s *LogStore) AddDedup(ctx context.Context, tenant, requestID string, joined, replayed, clientRetries int) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.AddDedup(ctx, tenant, requestID, joined, replayed, clientRetries)
}

// SaveState keeps a named value, once the database has applied the log's records before the call.
func (s *LogStore) SaveState(ctx context.Context, name string, value []byte) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.SaveState(ctx, name, value)
}

// CreateKey stores a new key, once the database has applied the log's records before the call.
func (s *LogStore) CreateKey(ctx context.Context, k *ledger.Key) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.CreateKey(ctx, k)
}

// UpdateKey writes a stored key's fields if it is still at k.Version,
// once the database has applied the log's records before the call. Key
// writes bypass the log: the database's one writer makes the
// conditional write and its check one transaction.
func (s *LogStore) UpdateKey(ctx context.Context, k *ledger.Key) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.UpdateKey(ctx, k)
}

// RevokeKey revokes a key in one conditional write, once the database has applied the log's records before the call.
func (s *LogStore) RevokeKey(ctx context.Context, id string, version int64, at time.Time) (*ledger.Key, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	return s.db.RevokeKey(ctx, id, version, at)
}

// Ping appends a heartbeat to the log and commits one to the database:
// both can be written now.
func (s *LogStore) Ping(ctx context.Context) error {
	if _, err := s.appendRecord(newRecord(kindHeartbeat, 0)); err != nil {
		return err
	}
	if err := s.barrier(ctx); err != nil {
		return err
	}
	return s.db.Ping(ctx)
}

// deleting runs del, which deletes finished records from the database
// directly, once the database has applied every record appended before
// it — Replace's among them. A Replace admitted to the log checked which
// request held the identity and must find that record when it is
// applied: deleting holds Replaces off from the barrier until del has
// committed, so none is checked before a delete and applied after it.
func (s *LogStore) deleting(ctx context.Context, del func() (int, error)) (int, error) {
	s.purge.Lock()
	defer s.purge.Unlock()
	s.purges.Add(1)       // odd: no Claim's read leaves a hint now
	defer s.purges.Add(1) // even again, and every hint before is stale
	if err := s.barrier(ctx); err != nil {
		return 0, err
	}
	return del()
}
