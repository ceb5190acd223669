package sqlite

import (
	"context"
	"fmt"
	"hash/maphash"
)

// The identities the database may hold (LogStore): a Claim of an identity
// the index does not have asks the database for its record only if the
// identity's hash is among them — a request seen for the first time
// (nearly every Claim) costs no read. The set is a superset: every
// identity with a record in the database, or whose claim is admitted to
// the log, has its 64-bit hash in it from before its record can be
// committed (a Claim adds it when it admits the claim, Replace before its
// write, the open from the whole table). A hash shared by two identities,
// or left behind by a record deleted since, only costs the read it would
// have cost anyway. Records deleted (released, settled away, expired) are
// forgotten only when the set is rebuilt from the database, once they
// number a quarter of it (rebuildKnown).
//
// Each idShard keeps the hashes of its identities in a Bloom filter
// (hashFilter: a few bytes a record, where the database may hold tens of
// millions; a false "maybe" costs the read) — the shard is chosen by the
// same hash — under its mu: Claim reads and adds them in the critical
// section where it takes the identity's place in the index.

// identityHash is the hash the index and the set file an identity by.
func (s *LogStore) identityHash(identity string) uint64 { return maphash.String(s.seed, identity) }

// shardOf is the idShard of an identity's hash.
func (s *LogStore) shardOf(h uint64) *idShard { return &s.ids[h%uint64(len(s.ids))] }

// know adds h to the set (sh.mu held), and to the one being built.
func (sh *idShard) know(h uint64) {
	sh.known.add(h)
	if sh.building != nil {
		sh.building.add(h)
	}
}

// mayHave reports whether the database may hold a record of the identity
// of hash h (sh.mu held): false is certain.
func (sh *idShard) mayHave(h uint64) bool {
	return sh.known.mayHave(h)
}

// forget counts records deleted from the database: the set holds their
// hashes until it is rebuilt.
func (s *LogStore) forget(n int) {
	if n > 0 {
		s.forgotten.Add(int64(n))
	}
}

// loadKnown fills the set with the identities the database holds (at
// open: nothing else runs).
func (s *LogStore) loadKnown(ctx context.Context) error {
	var hs [][]uint64
	if err := s.scanByShard(ctx, &hs); err != nil {
		return err
	}
	for i := range s.ids {
		s.ids[i].known = filterOf(hs[i])
	}
	return nil
}

// scanIdentities calls fn with the hash of every identity the database
// holds now (one read transaction).
func (s *LogStore) scanIdentities(ctx context.Context, fn func(h uint64)) error {
	rows, err := s.db.r.QueryContext(ctx, `SELECT identity FROM requests`)
	if err != nil {
		return fmt.Errorf("read the identities the ledger holds: %w", err)
	}
	defer rows.Close()
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("read the identities the ledger holds: %w", err)
		}
		fn(s.identityHash(id))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the identities the ledger holds: %w", err)
	}
	return nil
}

// scanByShard reads the hash of every identity the database holds, by
// the shard it belongs to.
func (s *LogStore) scanByShard(ctx context.Context, out *[][]uint64) error {
	byShard := make([][]uint64, len(s.ids))
	err := s.scanIdentities(ctx, func(h uint64) {
		i := h % uint64(len(s.ids))
		byShard[i] = append(byShard[i], h)
	})
	*out = byShard
	return err
}

// filterOf is a filter of hs, with room for as many again.
func filterOf(hs []uint64) *hashFilter {
	f := newHashFilter(2 * len(hs))
	for _, h := range hs {
		f.add(h)
	}
	return f
}

// maybeRebuildKnown rebuilds the set once the records deleted since it
// was built number a quarter of what it holds.
func (s *LogStore) maybeRebuildKnown(ctx context.Context) error {
	size := 0
	for i := range s.ids {
		sh := &s.ids[i]
		sh.mu.Lock()
		size += sh.known.len()
		sh.mu.Unlock()
	}
	if 4*s.forgotten.Load() < int64(size) {
		return nil
	}
	return s.rebuildKnown(ctx)
}

// rebuildKnown builds the set again from the identities the index holds
// and then those the database holds, while Claims go on: from its start,
// what they add goes to the new set too. An identity whose claim was
// admitted before the start is in the index then (it is until its finish
// is applied) or was applied before the database is read; either way it
// is found.
func (s *LogStore) rebuildKnown(ctx context.Context) error {
	s.rebuild.Lock()
	defer s.rebuild.Unlock()
	forgotten := s.forgotten.Load()
	for i := range s.ids {
		sh := &s.ids[i]
		sh.mu.Lock()
		sh.building = newHashFilter(2 * sh.known.len())
		for id := range sh.m {
			sh.building.add(s.identityHash(id))
		}
		sh.mu.Unlock()
	}
	var byShard [][]uint64
	err := s.scanByShard(ctx, &byShard)
	for i := range s.ids {
		sh := &s.ids[i]
		sh.mu.Lock()
		if err == nil {
			for _, h := range byShard[i] {
				sh.building.add(h)
			}
			sh.known = sh.building
		}
		sh.building = nil
		sh.mu.Unlock()
	}
	if err != nil {
		return err
	}
	s.forgotten.Add(-forgotten)
	return nil
}
