package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// errDuplicateSeq: a write's first event has a sequence number the
// request's events already have (the database would refuse the row).
var errDuplicateSeq = errors.New("ledger: duplicate event sequence number")

// Claim creates the record and its first events with one log record, or
// returns the existing one. The identity is taken in the index before the
// append: a second Claim of it waits for the first's record to be durable
// and gets it; a failed append gives it back.
func (s *LogStore) Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	h := s.identityHash(rec.Identity)
	sh := s.shardOf(h)
	for {
		sh.mu.Lock()
		e := sh.m[rec.Identity]
		switch {
		case e == nil:
			e = &entry{rec: indexed(rec), busy: make(chan struct{})}
			sh.m[rec.Identity] = e
			delete(sh.seen, rec.Identity) // whatever this claim makes of it
			maybe := sh.mayHave(h)
			sh.know(h)
			sh.mu.Unlock()
			return s.create(ctx, e, rec, events, maybe)
		case e.busy != nil:
			ch := e.busy
			sh.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			continue
		case s.gone(e):
			s.drop(e) // the database answers for it
			sh.mu.Unlock()
			continue
		case e.released:
			lsn := e.finishLSN
			sh.mu.Unlock()
			if err := s.waitApplied(ctx, lsn); err != nil {
				return nil, false, err
			}
			continue
		}
		existing := indexed(&e.rec)
		sh.mu.Unlock()
		return &existing, false, nil
	}
}

// create writes a new claim for e (held, fresh) unless the database has a
// record of its identity: it asks the database only if it may have one
// (maybe; logknown.go).
func (s *LogStore) create(ctx context.Context, e *entry, rec *ledger.Record, events []ledger.Event, maybe bool) (*ledger.Record, bool, error) {
	if maybe {
		p0 := s.purges.Load()
		existing, err := s.record(ctx, rec.Identity)
		if err == nil {
			s.abandonSeen(e, existing.RequestID, p0)
			return existing, false, nil
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			s.abandon(e)
			return existing, false, err
		}
	}
	sh := s.idShard(rec.Identity)
	sh.mu.Lock()
	s.register(e)
	sh.mu.Unlock()
	if _, err := s.appendRecord(encodeClaim(rec, events)); err != nil {
		s.abandon(e)
		return nil, false, fmt.Errorf("claim %s: %w", rec.RequestID, err)
	}
	if len(events) > 0 {
		sh.mu.Lock()
		e.seqs = append(e.seqs, events[0].Seq)
		sh.mu.Unlock()
	}
	s.release(e)
	return nil, true, nil
}

// record reads the identity's record from the database (a point read of
// a few pages). It is not interrupted when ctx ends: with a context that
// can end, database/sql and the driver each start a goroutine per query
// to watch it — two goroutines per read, which a Claim that finds a
// finished twin and the Replace that follows it paid twice.
func (s *LogStore) record(ctx context.Context, identity string) (*ledger.Record, error) {
	return scanRecord(s.get.QueryRowContext(context.WithoutCancel(ctx), identity))
}

// abandonSeen is abandon after a read found the identity held by
// request id in the database, which it remembers for a Replace that
// follows (seen): no entry of the identity was made since the read began
// (e was held across it), and no delete ran (purges was even and still is
// when the read began and the hint is used).
func (s *LogStore) abandonSeen(e *entry, id string, purges int64) {
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	s.drop(e)
	if purges%2 == 0 {
		if len(sh.seen) >= seenMax {
			clear(sh.seen) // the hints of arrivals that were not replaced
		}
		if sh.seen == nil {
			sh.seen = map[string]seen{}
		}
		sh.seen[e.rec.Identity] = seen{requestID: id, purges: purges}
	}
	sh.mu.Unlock()
	s.release(e)
}

// abandon drops e (held) and releases it.
func (s *LogStore) abandon(e *entry) {
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	s.drop(e)
	sh.mu.Unlock()
	s.release(e)
}

// Append writes events with one log record, fenced by their generation in
// the index. With or without wait it returns once the record is durable:
// the log keeps a caller's writes in the order it made them only so.
func (s *LogStore) Append(ctx context.Context, wait bool, events ...ledger.Event) error {
	if len(events) == 0 {
		return nil
	}
	id, gen := events[0].RequestID, events[0].Generation
	e, err := s.holdRequest(ctx, id)
	if err != nil {
		return err
	}
	if e == nil {
		return s.refuse(ctx, id, gen, events)
	}
	defer s.release(e)
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	err = admit(e, gen, events)
	sh.mu.Unlock()
	if err != nil {
		return s.keepStale(ctx, err, events)
	}
	if _, err := s.appendRecord(encodeAppend(events)); err != nil {
		return fmt.Errorf("append events of %s: %w", id, err)
	}
	sh.mu.Lock()
	e.seqs = append(e.seqs, events[0].Seq)
	sh.mu.Unlock()
	return nil
}

// Finish commits a terminal with one log record, fenced in the index: the
// request is held from the check until the record is durable, so no
// takeover, settle or second finish comes in between.
func (s *LogStore) Finish(ctx context.Context, f *ledger.Finish) error {
	var resp []byte
	if f.Response != nil {
		var err error
		if resp, err = ledger.EncodeResponse(f.Response); err != nil {
			return fmt.Errorf("encode the stored response of %s: %w", f.RequestID, err)
		}
	}
	e, err := s.holdRequest(ctx, f.RequestID)
	if err != nil {
		return err
	}
	if e == nil {
		return s.refuse(ctx, f.RequestID, f.Generation, f.Events)
	}
	defer s.release(e)
	sh := s.idShard(e.rec.Identity)
	sh.mu.Lock()
	err = admit(e, f.Generation, f.Events)
	sh.mu.Unlock()
	if err != nil {
		return s.keepStale(ctx, err, f.Events)
	}
	lsn, err := s.appendRecord(encodeFinish(f, resp))
	if err != nil {
		return fmt.Errorf("finish %s: %w", f.RequestID, err)
	}
	sh.mu.Lock()
	e.finishLSN, e.released = lsn, f.Release
	e.rec.State, e.rec.FinishedAt, e.rec.Response = f.State, fromNS(ns(f.At)), cloneResponse(f.Response)
	if f.Takeover {
		e.rec.Generation++
	}
	if len(f.Events) > 0 {
		e.seqs = append(e.seqs, f.Events[0].Seq)
	}
	sh.mu.Unlock()
	return nil
}

// keepStale keeps the events of a write the fence refused as evidence, as
// the database does, and returns err.
func (s *LogStore) keepStale(ctx context.Context, err error, events []ledger.Event) error {
	if !errors.Is(err, ledger.ErrStaleGeneration) && !errors.Is(err, ledger.ErrFinished) || len(events) == 0 {
		return err
	}
	if werr := s.db.write(ctx, true, func(tx wtx) error { insertStale(tx, events); return nil }); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// refuse answers a write for a request the index does not hold: the
// database has it finished, or another request has its identity, or it
// never was; the database's fence says which.
func (s *LogStore) refuse(ctx context.Context, id string, gen int64, events []ledger.Event) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	var cur int64
	var state string
	err := s.db.r.QueryRowContext(ctx, qFence, id).Scan(&cur, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && cur != gen:
		err = ledger.ErrStaleGeneration
	case err != nil:
		return fmt.Errorf("fence %s: %w", id, err)
	case ledger.State(state) != ledger.InProgress:
		err = ledger.ErrFinished
	default:
		return fmt.Errorf("ledger: request %s is in progress and not in the log's index", id)
	}
	return s.keepStale(ctx, err, events)
}

// Takeover moves an in-progress request to owner with a new generation.
// The request is held across the database's write and the index's update,
// so no write of the generation fenced off is admitted to the log between
// them.
func (s *LogStore) Takeover(ctx context.Context, requestID, owner string, gen int64, leaseUntil time.Time) (int64, error) {
	e, err := s.holdRequest(ctx, requestID)
	if err != nil {
		return 0, err
	}
	if e != nil {
		defer s.release(e)
	}
	if err := s.barrier(ctx); err != nil {
		return 0, err
	}
	next, err := s.db.Takeover(ctx, requestID, owner, gen, leaseUntil)
	if err == nil && e != nil {
		sh := s.idShard(e.rec.Identity)
		sh.mu.Lock()
		e.rec.Generation, e.rec.Owner, e.rec.LeaseUntil = next, owner, fromNS(ns(leaseUntil))
		sh.mu.Unlock()
	}
	return next, err
}

// Settle finishes many requests in one commit of the database, holding
// each of them (in identity order, so two settles never wait on each
// other) across it.
func (s *LogStore) Settle(ctx context.Context, fs []*ledger.Finish) ([]string, error) {
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.RequestID)
	}
	held, err := s.holdAll(ctx, ids)
	defer func() {
		for _, e := range held {
			s.release(e)
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	settled, err := s.db.Settle(ctx, fs)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		if f.Release && slices.Contains(settled, f.RequestID) {
			s.forget(1)
		}
	}
	byID := map[string]*entry{}
	for _, e := range held {
		byID[e.rec.RequestID] = e
	}
	for _, id := range settled {
		if e := byID[id]; e != nil {
			sh := s.idShard(e.rec.Identity)
			sh.mu.Lock()
			s.drop(e) // the database has it finished
			sh.mu.Unlock()
		}
	}
	return settled, nil
}

// holdAll holds the entries of the requests ids the index has, in
// identity order; it returns those it holds, even with an error.
func (s *LogStore) holdAll(ctx context.Context, ids []string) ([]*entry, error) {
	var found []*entry
	seen := map[*entry]bool{}
	for _, id := range ids {
		e := s.byRequest(id)
		if e != nil && !seen[e] {
			seen[e] = true
			found = append(found, e)
		}
	}
	slices.SortFunc(found, func(a, b *entry) int {
		if a.rec.Identity < b.rec.Identity {
			return -1
		}
		return 1
	})
	var held []*entry
	for _, e := range found {
		h, err := s.holdRequest(ctx, e.rec.RequestID)
		if err != nil {
			return held, err
		}
		if h != nil {
			held = append(held, h)
		}
	}
	return held, nil
}

// Replace swaps the identity's record for a new request with one log
// record, as Claim writes one: the identity is held from the check until
// the record is durable, and the new request is indexed. Which request
// holds the identity is the index's answer while it has an entry for it
// (its writes may not be applied yet); without one, every write of the
// identity is applied, and the database's.
func (s *LogStore) Replace(ctx context.Context, prev string, rec *ledger.Record, events []ledger.Event) (bool, error) {
	h := s.identityHash(rec.Identity)
	e, err := s.holdIdentity(ctx, rec.Identity)
	if err != nil {
		return false, err
	}
	// No delete of a finished record runs between the check and the
	// append (LogStore.deleting).
	s.purge.RLock()
	defer s.purge.RUnlock()
	sh := s.shardOf(h)
	sh.mu.Lock()
	sh.know(h) // before the database can have it
	cur, placeholder := e.rec.RequestID, e.rec.RequestID == ""
	if e.released {
		cur = "" // its finish, durable, deletes the record
	}
	if hint, ok := sh.seen[rec.Identity]; ok && placeholder && hint.purges == s.purges.Load() {
		// The claim before this Replace read the database, and nothing
		// has changed the identity's record since (abandonSeen).
		cur, placeholder = hint.requestID, false
	}
	delete(sh.seen, rec.Identity)
	sh.mu.Unlock()
	if placeholder {
		existing, gerr := s.record(ctx, rec.Identity)
		switch {
		case gerr == nil:
			cur = existing.RequestID
		case !errors.Is(gerr, ledger.ErrNotFound):
			err = fmt.Errorf("replace %s: %w", prev, gerr)
		}
	}
	ok := err == nil && prev != "" && cur == prev
	if ok {
		if _, err = s.appendRecord(encodeReplace(prev, rec, events)); err != nil {
			ok, err = false, fmt.Errorf("replace %s: %w", prev, err)
		}
	}
	sh.mu.Lock()
	if ok || e.rec.RequestID == "" {
		s.drop(e) // the request replaced, or the place held
	}
	if ok {
		ne := &entry{rec: indexed(rec)}
		if len(events) > 0 {
			ne.seqs = []int64{events[0].Seq}
		}
		sh.m[rec.Identity] = ne
		s.register(ne)
	}
	sh.mu.Unlock()
	s.release(e)
	return ok, err
}

// holdIdentity holds the identity's entry, or a place for it (an entry
// with no request id) if the index has none.
func (s *LogStore) holdIdentity(ctx context.Context, identity string) (*entry, error) {
	sh := s.idShard(identity)
	for {
		sh.mu.Lock()
		e := sh.m[identity]
		switch {
		case e == nil:
			e = &entry{rec: ledger.Record{Identity: identity}, busy: make(chan struct{})}
			sh.m[identity] = e
			sh.mu.Unlock()
			return e, nil
		case e.busy != nil:
			ch := e.busy
			sh.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		case s.gone(e):
			s.drop(e)
			sh.mu.Unlock()
			continue
		}
		e.busy = make(chan struct{})
		sh.mu.Unlock()
		return e, nil
	}
}

// Renew extends owner's live leases of ids in the database, and in the
// index those the owner still holds.
func (s *LogStore) Renew(ctx context.Context, owner string, ids []string, now, until time.Time) ([]string, error) {
	if err := s.barrier(ctx); err != nil {
		return nil, err
	}
	lost, err := s.db.Renew(ctx, owner, ids, now, until)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if slices.Contains(lost, id) {
			continue
		}
		e := s.byRequest(id)
		if e == nil {
			continue
		}
		sh := s.idShard(e.rec.Identity)
		sh.mu.Lock()
		if !e.dropped && e.rec.Owner == owner && !e.rec.State.Finished() {
			e.rec.LeaseUntil = fromNS(ns(until))
		}
		sh.mu.Unlock()
	}
	return lost, nil
}
