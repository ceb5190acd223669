package sqlite

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/oncegate/oncegate/internal/ledger"
)

// The index of a LogStore: every request not yet finished and applied —
// those the database has in progress, and those whose claim or finish is
// in the log and not yet in the database — by identity and by request id.
// An entry whose finish the database has applied is as good as gone: the
// database answers for it, and whoever meets it drops it.

// idShard is a part of the index, by identity; its mu guards the fields
// of its entries too.
type idShard struct {
	mu sync.Mutex
	m  map[string]*entry
	// known holds the hashes of the shard's identities the database may
	// have a record of; building, while the set is rebuilt, the new one
	// (logknown.go).
	known, building *hashFilter
	// seen holds, by identity, the request a Claim's read of the
	// database found holding it (abandonSeen): the Replace that follows
	// need not read it again.
	seen map[string]seen
}

// seen is what a Claim's read found: the request holding the identity,
// and LogStore.purges when the read began.
type seen struct {
	requestID string
	purges    int64
}

// seenMax bounds an idShard's seen.
const seenMax = 512

// reqShard is a part of the index by request id (taken after an idShard's
// mu, never before).
type reqShard struct {
	mu sync.Mutex
	m  map[string]*entry
}

// entry is an indexed request. A call that checks and then writes holds
// it (busy): one at a time, so what it checked holds until its write is
// durable (a finish) or applied (a takeover).
type entry struct {
	rec ledger.Record // what Get would return once the database has applied it
	// seqs are the first sequence numbers of its events' rows: the
	// database refuses a second row at one of them.
	seqs      []int64
	finishLSN int64         // its finish's record (0: none yet)
	released  bool          // its finish deletes the record
	busy      chan struct{} // non-nil while a call holds it; closed on release
	dropped   bool
}

func (s *LogStore) idShard(identity string) *idShard { return s.shardOf(s.identityHash(identity)) }

func (s *LogStore) reqShard(id string) *reqShard {
	return &s.reqs[maphash.String(s.seed, id)%uint64(len(s.reqs))]
}

// indexed is the copy of rec the index keeps, its times as the database
// returns them.
func indexed(rec *ledger.Record) ledger.Record {
	r := *rec
	r.LeaseUntil, r.CreatedAt, r.FinishedAt = fromNS(ns(r.LeaseUntil)), fromNS(ns(r.CreatedAt)), fromNS(ns(r.FinishedAt))
	if r.State == ledger.InProgress {
		r.FinishedAt = time0
	}
	r.Response = cloneResponse(r.Response)
	return r
}

var time0 = fromNS(0)

func cloneResponse(r *ledger.Response) *ledger.Response {
	if r == nil {
		return nil
	}
	c := *r
	c.Body = slices.Clone(r.Body)
	return &c
}

// register makes e findable by its request id (its shard's mu held).
func (s *LogStore) register(e *entry) {
	rs := s.reqShard(e.rec.RequestID)
	rs.mu.Lock()
	rs.m[e.rec.RequestID] = e
	rs.mu.Unlock()
}

// drop removes e from the index (its identity shard's mu held).
func (s *LogStore) drop(e *entry) {
	if e.dropped {
		return
	}
	e.dropped = true
	sh := s.idShard(e.rec.Identity)
	if sh.m[e.rec.Identity] == e {
		delete(sh.m, e.rec.Identity)
	}
	if e.rec.RequestID == "" {
		return
	}
	rs := s.reqShard(e.rec.RequestID)
	rs.mu.Lock()
	if rs.m[e.rec.RequestID] == e {
		delete(rs.m, e.rec.RequestID)
	}
	rs.mu.Unlock()
}

// appliedNow is the last LSN the database has applied.
func (s *LogStore) appliedNow() int64 {
	s.amu.Lock()
	defer s.amu.Unlock()
	return s.applied
}

// gone reports whether e's finish is applied: the database answers for
// it now (its shard's mu held).
func (s *LogStore) gone(e *entry) bool {
	return e.dropped || e.finishLSN != 0 && s.appliedNow() >= e.finishLSN
}

// byRequest is the index's entry of request id, or nil.
func (s *LogStore) byRequest(id string) *entry {
	rs := s.reqShard(id)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[id]
}

// holdRequest finds the request's entry and holds it; nil if the index
// has none (or only one the database answers for).
func (s *LogStore) holdRequest(ctx context.Context, id string) (*entry, error) {
	e := s.byRequest(id)
	if e == nil {
		return nil, nil
	}
	sh := s.idShard(e.rec.Identity)
	for {
		sh.mu.Lock()
		if s.gone(e) {
			if e.busy == nil {
				s.drop(e)
			}
			sh.mu.Unlock()
			return nil, nil
		}
		if e.busy == nil {
			e.busy = make(chan struct{})
			sh.mu.Unlock()
			return e, nil
		}
		ch := e.busy
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// release lets the next call hold e, dropping it if the database answers
// for it by now.
func (s *LogStore) release(e *entry) {
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	close(e.busy)
	e.busy = nil
	if s.gone(e) {
		s.drop(e)
	}
	sh.mu.Unlock()
}

// dropApplied drops the entry of a request whose finish the database has
// applied, unless a call holds it (its release drops it).
func (s *LogStore) dropApplied(id string) {
	e := s.byRequest(id)
	if e == nil {
		return
	}
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	if e.busy == nil && s.gone(e) {
		s.drop(e)
	}
	sh.mu.Unlock()
}

// admit checks a write of events at generation gen against e (held): what
// the database's fence would answer, and whether the events' first
// sequence number is free.
func admit(e *entry, gen int64, evs []ledger.Event) error {
	switch {
	case e.released, e.rec.Generation != gen:
		return ledger.ErrStaleGeneration
	case e.rec.State.Finished():
		return ledger.ErrFinished
	case len(evs) > 0 && slices.Contains(e.seqs, evs[0].Seq):
		return fmt.Errorf("%w: request %s has an event %d", errDuplicateSeq, e.rec.RequestID, evs[0].Seq)
	}
	return nil
}

// loadIndex indexes the requests the database has in progress, and
// loads the identities it holds.
func (s *LogStore) loadIndex(ctx context.Context) error {
	if err := s.loadKnown(ctx); err != nil {
		return err
	}
	rows, err := s.db.r.QueryContext(ctx, `SELECT `+recordCols+` FROM requests WHERE finished_at = 0 AND state = 'in_progress'`)
	if err != nil {
		return fmt.Errorf("index the requests in progress: %w", err)
	}
	byID := map[string]*entry{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return fmt.Errorf("index the requests in progress: %w", err)
		}
		e := &entry{rec: *r}
		byID[r.RequestID] = e
		sh := s.idShard(r.Identity)
		sh.m[r.Identity] = e
		s.reqShard(r.RequestID).m[r.RequestID] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = s.db.r.QueryContext(ctx, `SELECT e.request_id, e.seq FROM events e JOIN requests r ON r.request_id = e.request_id
		WHERE r.finished_at = 0 AND r.state = 'in_progress' AND e.seq > 0`)
	if err != nil {
		return fmt.Errorf("index the events in progress: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			return err
		}
		if e := byID[id]; e != nil {
			e.seqs = append(e.seqs, seq)
		}
	}
	return rows.Err()
}
