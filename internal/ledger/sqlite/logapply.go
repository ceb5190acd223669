package sqlite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/oncegate/oncegate/internal/ledger"
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
// records the last one's LSN as applied. A record the database refuses as
// a write today would be refused (a fenced-off generation: the index in
// front of the log admits none, so refused counts them as the bugs they
// would be) is applied as such: its events kept as stale evidence.
func (s *Store) applyRecords(ctx context.Context, recs []*logRecord, refused *int) error {
	if len(recs) == 0 {
		return nil
	}
	last := recs[len(recs)-1].lsn
	n := 0
	err := s.write(ctx, true, func(tx wtx) error {
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

// errRefused: a claim whose identity already had a record.
var errRefused = errors.New("ledger log: record refused")

func applyRecord(tx wtx, lr *logRecord) error {
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
	case kindAppend:
		if err := fence(tx, lr.events[0].RequestID, lr.events[0].Generation); err != nil {
			insertStale(tx, lr.events)
			return err
		}
		insertEvents(tx, eventArgs(lr.events))
	case kindFinish:
		return finish(tx, lr.fin, lr.resp, eventArgs(lr.fin.Events))
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
		if err := s.applyRecords(ctx, todo[start:min(start+256, len(todo))], &refused); err != nil {
			return 0, 0, err
		}
	}
	return last, refused, nil
}
