package sqlite

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// metaApplied is the meta row that holds the LSN of the last log record
// the database has applied: written in the transaction that applies it, so
// a record is applied exactly once whatever crashes.
const metaApplied = "intentlog_applied"

// appliedLSN reads the last applied LSN (0: none).
func (s *Store) appliedLSN(ctx context.Context) (int64, error) {
	var v int64
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE((SELECT CAST(v AS INTEGER) FROM meta WHERE k = ?), 0)`, metaApplied).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read the log position applied: %w", err)
	}
	return v, nil
}

// applyRecords applies records (in LSN order) in one transaction and
// records the last one's LSN as applied, committing as mode says: the
// log holds the records durably, so lazily, unless the caller is about
// to delete the log's copy. A record the database refuses as
// a write today would be refused (a fenced-off generation: the index in
// front of the log admits none, so refused counts them as the bugs they
// would be) is applied as such: its events kept as stale evidence.
func (s *Store) applyRecords(ctx context.Context, recs []*logRecord, refused *int, mode syncMode) error {
	if len(recs) == 0 {
		return nil
	}
	last := recs[len(recs)-1].lsn
	n := 0
	err := s.writeSync(ctx, true, mode, func(tx wtx) error {
		n = 0
		for _, lr := range recs {
			err := applyRecord(tx, lr)
			switch {
			case errors.Is(err, errRefused), errors.Is(err, ledger.ErrStaleGeneration), errors.Is(err, ledger.ErrFinished):
				n++
			case err != nil:
				return fmt.Errorf("apply log record %d: %w", lr.lsn, err)
			}
		}
		_, err := tx.Exec(`INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`, metaApplied, last)
		return err
	})
	if err == nil {
		*refused += n
	}
	return err
}

// applyLog applies records as applyRecords does. If their transaction
// fails, it applies them again one a transaction, and sets aside each
// record that fails alone because the database refuses its data — a
// constraint, a type or a size it will never accept (poisoned), or a
// record that cannot be decoded: a bug either way. Such a record is kept
// in the meta table under intentlog_refused:<LSN> (its bytes) and
// intentlog_refused_why:<LSN> (the error), counted in refused, and
// applied past, so that the store goes on and the next open does not
// stop at it again. Any other failure (an I/O error, a full disk) is
// returned: the store stops, and the record is applied when it opens
// again.
func (s *Store) applyLog(ctx context.Context, recs []*logRecord, refused *int, mode syncMode) error {
	err := s.applyRecords(ctx, recs, refused, mode)
	if err == nil || !poisoned(err) {
		return err
	}
	for i, lr := range recs {
		m := syncLazy
		if i == len(recs)-1 {
			m = mode
		}
		err := s.applyRecords(ctx, []*logRecord{lr}, refused, m)
		switch {
		case err == nil:
			continue
		case !poisoned(err):
			return err
		}
		if err := s.setAside(ctx, lr, err, m); err != nil {
			return err
		}
		*refused++
	}
	return nil
}

// poisoned reports whether err says the database refuses a record's data
// — it would refuse it every time — rather than that it failed.
func poisoned(err error) bool {
	if errors.Is(err, errBadRecord) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_RANGE:
		return true
	}
	return false
}

// metaRefused prefixes the meta rows of a record set aside.
const metaRefused = "intentlog_refused"

// setAside keeps a record the database refused (applyLog) and moves the
// position applied past it, in one transaction.
func (s *Store) setAside(ctx context.Context, lr *logRecord, why error, mode syncMode) error {
	key := fmt.Sprintf("%s:%020d", metaRefused, lr.lsn)
	err := s.writeSync(ctx, true, mode, func(tx wtx) error {
		const q = `INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`
		raw := lr.raw
		if raw == nil {
			raw = []byte{}
		}
		if _, err := tx.Exec(q, key, raw); err != nil {
			return err
		}
		if _, err := tx.Exec(q, metaRefused+"_why:"+key[len(metaRefused)+1:], why.Error()); err != nil {
			return err
		}
		_, err := tx.Exec(q, metaApplied, lr.lsn)
		return err
	})
	if err != nil {
		return fmt.Errorf("set aside log record %d the database refused (%v): %w", lr.lsn, why, err)
	}
	return nil
}

// errRefused: a claim whose identity already had a record.
var errRefused = errors.New("ledger log: record refused")

func applyRecord(tx wtx, lr *logRecord) error {
	if lr.bad != nil {
		return lr.bad
	}
	switch lr.kind {
	case kindClaim:
		res, err := insertRecord(tx, recordArgs(lr.rec))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errRefused
		}
		insertEvents(tx, eventArgs(lr.events))
	case kindReplace:
		// The index admitted it only while prev's record held the
		// identity, as Store.Replace's statement checks.
		res, err := tx.exec(qReplaceDelete, lr.rec.Identity, lr.prev)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errRefused
		}
		if _, err := insertRecord(tx, recordArgs(lr.rec)); err != nil {
			return err
		}
		insertEvents(tx, eventArgs(lr.events))
	case kindAppend:
		if err := fence(tx, lr.events[0].RequestID, lr.events[0].Generation); err != nil {
			insertStale(tx, lr.events)
			return err
		}
		insertEvents(tx, eventArgs(lr.events))
	case kindFinish:
		return finish(tx, lr.fin, lr.resp, eventArgs(lr.fin.Events), lr.factArgs())
	}
	return nil
}

// metaSynced is the meta row syncNow rewrites.
const metaSynced = "intentlog_synced"

// syncNow returns once every commit before it is on the disk: it commits
// a change at synchronous=FULL, whose sync of the WAL covers the frames
// of every commit before it (those a checkpoint has moved out of the WAL
// are in the database file, which SQLite syncs before it reuses the
// WAL). The intent log's files it covers may then go.
func (s *Store) syncNow(ctx context.Context) error {
	seq := s.syncSeq.Add(1)
	err := s.writeSync(ctx, true, syncFull, func(tx wtx) error {
		_, err := tx.Exec(`INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`, metaSynced,
			fmt.Sprintf("%d.%d", time.Now().UnixNano(), seq))
		return err
	})
	if err != nil {
		return fmt.Errorf("sync the database: %w", err)
	}
	return nil
}

// replayLog applies the records past the database's position, in LSN
// order, a few hundred a transaction; it returns the highest LSN seen.
func (s *Store) replayLog(ctx context.Context, recs []*logRecord, applied int64) (last int64, refused int, err error) {
	slices.SortFunc(recs, func(a, b *logRecord) int { return cmp.Compare(a.lsn, b.lsn) })
	last = applied
	var todo []*logRecord
	for _, lr := range recs {
		if lr.lsn > applied {
			todo = append(todo, lr)
		}
		last = max(last, lr.lsn)
	}
	for start := 0; start < len(todo); start += 256 {
		if err := s.applyLog(ctx, todo[start:min(start+256, len(todo))], &refused, syncLazy); err != nil {
			return 0, 0, err
		}
	}
	return last, refused, nil
}

// logEnd is the highest LSN the intent log's files beside path hold now
// (0: none), read without taking the writer's lock.
func logEnd(path string) (int64, error) {
	files, _, err := segments(path)
	if err != nil {
		return 0, err
	}
	var end int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // applied and deleted meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("read the intent log: %w", err)
		}
		for off := min(len(logMagic), len(b)); ; {
			rec, n, err := intentlog.ReadFrame(b[off:])
			if err != nil || len(rec) < recordHead {
				break
			}
			end = max(end, int64(binary.LittleEndian.Uint64(rec[lsnOff:])))
			off += n
		}
	}
	return end, nil
}

// logMagic starts every intent log file (intentlog's format).
const logMagic = "oncelog\x01"

// catchUpIdle is how long CatchUp waits for the database's position to
// move before it concludes that no writer is applying the log.
const catchUpIdle = 2 * time.Second

// CatchUp waits until the database has applied every record the intent
// log beside it holds now (a LogStore writes the log; docs/durability.md,
// "An intent log in front of SQLite"): a reader that calls it then sees
// every write acknowledged before the call. If the database's position
// does not move for two seconds — no writer is applying the log: it
// crashed, and the records are applied when one opens the file again — it
// returns ErrBehind.
func (s *Store) CatchUp(ctx context.Context) error {
	if s.path == "" {
		return nil // a writer: LogStore applies its own log
	}
	want, err := logEnd(s.path)
	if err != nil {
		return err
	}
	last, idle := int64(-1), time.Now()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		applied, err := s.appliedLSN(ctx)
		switch {
		case err != nil:
			return err
		case applied >= want:
			return nil
		case applied != last:
			last, idle = applied, time.Now()
		case time.Since(idle) > catchUpIdle:
			return fmt.Errorf("%w: the database applied the log up to %d of %d", ErrBehind, applied, want)
		}
		t.Reset(time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ErrBehind: the intent log holds records the database has not applied,
// and no writer is applying them.
var ErrBehind = errors.New("ledger: the database is behind its intent log")
