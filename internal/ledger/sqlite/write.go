package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger"
)

// recordArgs are r's values for qInsertRecord. They are made on the
// caller's goroutine, as are eventArgs: the writer, one goroutine for
// everyone, only runs the statements.
func recordArgs(r *ledger.Record) []any {
	stream := 0
	if r.Stream {
		stream = 1
	}
	finished := ns(r.FinishedAt)
	if r.State == ledger.InProgress {
		finished = 0 // requests_by_finish finds the unfinished at 0
	}
	return []any{r.Identity, r.RequestID, r.Tenant, r.Operation, r.RequestSHA256, stream, string(r.State),
		r.Owner, r.Generation, ns(r.LeaseUntil), ns(r.CreatedAt), finished}
}

func insertRecord(tx wtx, args []any) (sql.Result, error) {
	return tx.exec(qInsertRecord, args...)
}

// eventArgs are the values of one write's events (one request's, in
// order) as one row of the events table; nil for none.
func eventArgs(evs []ledger.Event) []any {
	if len(evs) == 0 {
		return nil
	}
	row := rowOf(evs)
	return row.args()
}

// insertEvents adds a row of eventArgs to the batch.
func insertEvents(tx wtx, row []any) {
	tx.rows.events = append(tx.rows.events, row...)
}

func insertStale(tx wtx, evs []ledger.Event) {
	for _, e := range evs {
		_, _ = tx.exec(qInsertStale, e.RequestID, e.Generation, string(e.Type), ns(e.At), e.Data)
	}
}

// fence checks that requestID's record is still at generation gen and in
// progress.
func fence(tx wtx, requestID string, gen int64) error {
	var cur int64
	var state string
	err := tx.queryRow(qFence, requestID).Scan(&cur, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ledger.ErrStaleGeneration // the identity moved on to another request
	case err != nil:
		return err
	case cur != gen:
		return ledger.ErrStaleGeneration
	case ledger.State(state) != ledger.InProgress:
		return ledger.ErrFinished
	}
	return nil
}

// Claim creates the record and its first events, or returns the existing one.
func (s *Store) Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	var existing *ledger.Record
	created := false
	recArgs, evArgs := recordArgs(rec), eventArgs(events)
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := insertRecord(tx, recArgs)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			created = true
			insertEvents(tx, evArgs)
			return nil
		}
		existing, err = scanRecord(tx.queryRow(qSelectByID, rec.Identity))
		return err
	})
	return existing, created, err
}

// Replace swaps the identity's record for a new request.
func (s *Store) Replace(ctx context.Context, prev string, rec *ledger.Record, events []ledger.Event) (bool, error) {
	ok := false
	recArgs, evArgs := recordArgs(rec), eventArgs(events)
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.exec(qReplaceDelete, rec.Identity, prev)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		if _, err := insertRecord(tx, recArgs); err != nil {
			return err
		}
		ok = true
		insertEvents(tx, evArgs)
		return nil
	})
	return ok, err
}

// Append writes events fenced by their generation.
func (s *Store) Append(ctx context.Context, wait bool, events ...ledger.Event) error {
	if len(events) == 0 {
		return nil
	}
	evArgs := eventArgs(events)
	return s.write(ctx, wait, func(tx wtx) error {
		if err := fence(tx, events[0].RequestID, events[0].Generation); err != nil {
			insertStale(tx, events)
			return err
		}
		insertEvents(tx, evArgs)
		return nil
	})
}

// Finish commits a terminal with its response, events and receipt.
func (s *Store) Finish(ctx context.Context, f *ledger.Finish) error {
	// Encode here, on the caller's goroutine: the writer is one goroutine
	// for everyone.
	var resp []byte
	if f.Response != nil {
		var err error
		if resp, err = ledger.EncodeResponse(f.Response); err != nil {
			return fmt.Errorf("encode the stored response of %s: %w", f.RequestID, err)
		}
	}
	evArgs, facts := eventArgs(f.Events), finishFacts(f)
	return s.write(ctx, true, func(tx wtx) error { return finish(tx, f, resp, evArgs, facts) })
}

// finish writes a terminal; facts are its receipt's spend facts (factArgs).
func finish(tx wtx, f *ledger.Finish, resp []byte, evArgs, facts []any) error {
	// The fence is in the statement: only the current generation, in
	// progress, is finished.
	var res sql.Result
	var err error
	if f.Release {
		res, err = tx.exec(qRelease, f.RequestID, f.Generation)
	} else {
		gen := f.Generation
		if f.Takeover {
			gen++
		}
		res, err = tx.exec(qFinish, string(f.State), ns(f.At), resp, gen, f.RequestID, f.Generation)
	}
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		ferr := fence(tx, f.RequestID, f.Generation)
		if ferr == nil {
			ferr = ledger.ErrStaleGeneration
		}
		insertStale(tx, f.Events)
		return ferr
	}
	insertEvents(tx, evArgs)
	if f.Receipt != nil {
		tx.rows.receipts = append(tx.rows.receipts, f.RequestID, f.Tenant, f.Receipt)
		tx.rows.facts = append(tx.rows.facts, facts...)
	}
	tx.charge(f.Tenant, f.Charge, f.At)
	tx.chargeKey(f.Key, f.Charge, f.At)
	return nil
}

// Settle finishes many requests in one commit (recovery). Rows are written
// 500 at a time with multi-row statements, each still fenced by its own
// generation and by its lease having lapsed: a row another owner moved on,
// or whose owner renewed it meanwhile, is left alone, its events and
// receipt with it.
func (s *Store) Settle(ctx context.Context, fs []*ledger.Finish) ([]string, error) {
	var settled []string
	err := s.write(ctx, true, func(tx wtx) error {
		settled = settled[:0]
		for start := 0; start < len(fs); start += settleChunk {
			ids, err := settleChunkOf(tx, fs[start:min(start+settleChunk, len(fs))])
			if err != nil {
				return err
			}
			settled = append(settled, ids...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return settled, nil
}

const settleChunk = 500

func settleChunkOf(tx wtx, fs []*ledger.Finish) ([]string, error) {
	// Which rows are still at the generation recovery read, with their
	// lease lapsed? Only those are settled. (Plain IN on the unique
	// request_id: the index is used.)
	ids := make([]any, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.RequestID)
	}
	// The state is checked here, not in SQL: with it the planner prefers
	// the partial index of unfinished rows and scans all of them.
	rows, err := tx.Query(`SELECT request_id, generation, state, lease_until FROM requests WHERE request_id IN (`+placeholders(len(fs), 1)+`)`, ids...)
	if err != nil {
		return nil, err
	}
	type row struct{ gen, lease int64 }
	live := map[string]row{}
	for rows.Next() {
		var id, state string
		var r row
		if err := rows.Scan(&id, &r.gen, &state, &r.lease); err != nil {
			rows.Close()
			return nil, err
		}
		if ledger.State(state) == ledger.InProgress {
			live[id] = r
		}
	}
	rows.Close()
	var del, evs, rcs, fas []any
	var settled []string
	nDel, nEv, nRc, nFa := 0, 0, 0, 0
	for _, f := range fs {
		if r, ok := live[f.RequestID]; !ok || r.gen != f.Generation || r.lease >= ns(f.At) {
			continue // another owner moved it on, or its owner is alive
		}
		settled = append(settled, f.RequestID)
		if f.Release {
			del = append(del, f.RequestID)
			nDel++
		} else {
			gen := f.Generation
			if f.Takeover {
				gen++
			}
			if _, err := tx.exec(qSettle, string(f.State), ns(f.At), gen, f.RequestID); err != nil {
				return nil, err
			}
		}
		for i := range f.Events {
			row := rowOf(f.Events[i : i+1])
			evs = append(evs, row.args()...)
			nEv++
		}
		if f.Receipt != nil {
			rcs = append(rcs, f.RequestID, f.Tenant, f.Receipt)
			nRc++
			if fa := finishFacts(f); fa != nil {
				fas = append(fas, fa...)
				nFa++
			}
		}
		tx.charge(f.Tenant, f.Charge, f.At)
		tx.chargeKey(f.Key, f.Charge, f.At)
	}
	stmts := []struct {
		n    int
		q    string
		args []any
	}{
		{nDel, `DELETE FROM requests WHERE request_id IN (` + placeholders(nDel, 1) + `)`, del},
		{nEv, `INSERT INTO events (` + eventCols + `) VALUES ` + placeholders(nEv, 9), evs},
		{nRc, `INSERT INTO events (request_id, tenant, data, seq, last_seq, generation, type, at) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?,?,?,0,0,0,'receipt',0),`, nRc), ",") +
			` ON CONFLICT(request_id, seq) DO UPDATE SET data = excluded.data`, rcs},
		{nFa, factsInsert(nFa), fas},
	}
	for _, st := range stmts {
		if st.n == 0 {
			continue
		}
		if _, err := tx.Exec(st.q, st.args...); err != nil {
			return nil, fmt.Errorf("settle: %w", err)
		}
	}
	return settled, nil
}

// PutReceipt stores a receipt, and charges it, unless one exists.
func (s *Store) PutReceipt(ctx context.Context, rc *ledger.StoredReceipt) error {
	facts := factArgs(rc.Tenant, rc.RequestID, rc.Body)
	return s.write(ctx, false, func(tx wtx) error {
		res, err := tx.Exec(`INSERT INTO events (request_id, seq, last_seq, generation, type, at, tenant, data) VALUES (?,0,0,0,'receipt',0,?,?)
			ON CONFLICT(request_id, seq) DO NOTHING`, rc.RequestID, rc.Tenant, rc.Body)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			tx.rows.facts = append(tx.rows.facts, facts...)
			tx.charge(rc.Tenant, rc.Charge, rc.At)
			tx.chargeKey(rc.Key, rc.Charge, rc.At)
		}
		return nil
	})
}

// Takeover moves an in-progress request to owner with a new generation.
func (s *Store) Takeover(ctx context.Context, requestID, owner string, gen int64, leaseUntil time.Time) (int64, error) {
	var next int64
	err := s.write(ctx, true, func(tx wtx) error {
		if err := fence(tx, requestID, gen); err != nil {
			return err
		}
		next = gen + 1
		_, err := tx.Exec(`UPDATE requests SET owner = ?, generation = ?, lease_until = ? WHERE request_id = ?`, owner, next, ns(leaseUntil), requestID)
		return err
	})
	return next, err
}

// Renew extends owner's live leases of ids.
func (s *Store) Renew(ctx context.Context, owner string, ids []string, now, until time.Time) ([]string, error) {
	var lost []string
	err := s.write(ctx, true, func(tx wtx) error {
		lost = lost[:0]
		for _, id := range ids {
			res, err := tx.exec(qRenew, ns(until), id, owner, ns(now))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				lost = append(lost, id)
			}
		}
		return nil
	})
	return lost, err
}

// AddDedup adds to a receipt's dedup counts in the writer's transaction,
// so concurrent arrivals never lose a count.
func (s *Store) AddDedup(ctx context.Context, tenant, requestID string, joined, replayed, clientRetries int) error {
	return s.write(ctx, false, func(tx wtx) error {
		var body []byte
		err := tx.QueryRow(`SELECT data FROM events WHERE request_id = ? AND seq = 0 AND tenant = ?`, requestID, tenant).Scan(&body)
		if err != nil {
			return err
		}
		next, err := ledger.AddDedup(body, joined, replayed, clientRetries)
		if err != nil {
			return err
		}
		_, err = tx.Exec(`UPDATE events SET data = ? WHERE request_id = ? AND seq = 0`, next, requestID)
		return err
	})
}

// Secret returns the fingerprint secret, generating it once.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	var secret []byte
	err := s.write(ctx, true, func(tx wtx) error {
		if _, err := tx.Exec(`INSERT INTO meta (k, v) VALUES ('fingerprint_secret', ?) ON CONFLICT(k) DO NOTHING`, fresh); err != nil {
			return err
		}
		return tx.QueryRow(`SELECT v FROM meta WHERE k = 'fingerprint_secret'`).Scan(&secret)
	})
	return secret, err
}

// SaveState keeps a named value in the meta table.
func (s *Store) SaveState(ctx context.Context, name string, value []byte) error {
	return s.write(ctx, true, func(tx wtx) error {
		_, err := tx.Exec(`INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`, "state:"+name, value)
		return err
	})
}

// Expire deletes records finished before cutoff.
func (s *Store) Expire(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	err := s.write(ctx, true, func(tx wtx) error {
		res, err := tx.Exec(`DELETE FROM requests WHERE finished_at > 0 AND finished_at < ? AND state != 'in_progress'`, ns(cutoff))
		if err != nil {
			return err
		}
		c, _ := res.RowsAffected()
		n = int(c)
		return nil
	})
	return n, err
}
