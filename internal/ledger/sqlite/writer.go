package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
)

// maxBatch bounds how many queued writes share one commit.
const maxBatch = 1024

// The writer's statements, prepared once on its one connection: compiling
// SQL on every write would cost more than the writes.
const (
	qInsertRecord  = `INSERT INTO requests (` + recordCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL) ON CONFLICT(identity) DO NOTHING`
	qSelectByID    = `SELECT ` + recordCols + ` FROM requests WHERE identity = ?`
	qInsertStale   = `INSERT INTO stale_events (request_id, generation, type, at, data) VALUES (?,?,?,?,?)`
	qFence         = `SELECT generation, state FROM requests WHERE request_id = ?`
	qFinish        = `UPDATE requests SET state = ?, finished_at = ?, response = ?, generation = ? WHERE request_id = ? AND generation = ? AND state = 'in_progress'`
	qRelease       = `DELETE FROM requests WHERE request_id = ? AND generation = ? AND state = 'in_progress'`
	qReplaceDelete = `DELETE FROM requests WHERE identity = ? AND request_id = ?`
	qSettle        = `UPDATE requests SET state = ?, finished_at = ?, generation = ? WHERE request_id = ?`
	qCharge        = `INSERT INTO tenant_spend (day, tenant, charged) VALUES (?,?,?) ON CONFLICT(day, tenant) DO UPDATE SET charged = charged + excluded.charged`
	qKeyCharge     = `INSERT INTO key_spend (day, key_id, charged) VALUES (?,?,?) ON CONFLICT(day, key_id) DO UPDATE SET charged = charged + excluded.charged`
	qRenew         = `UPDATE requests SET lease_until = ? WHERE request_id = ? AND owner = ? AND state = 'in_progress' AND lease_until >= ?`
	// A batch's transaction: IMMEDIATE takes the write lock at BEGIN, as
	// a writer that is the database's only one should.
	qBegin    = `BEGIN IMMEDIATE`
	qCommit   = `COMMIT`
	qRollback = `ROLLBACK`
	// A store behind a log sets its writer's sync per batch. Not
	// prepared: SQLite applies this pragma when it compiles it.
	qSyncFull   = `PRAGMA synchronous=FULL`
	qSyncNormal = `PRAGMA synchronous=NORMAL`
)

var writes = func() []string {
	out := []string{qInsertRecord, qSelectByID, qInsertStale, qFence, qFinish, qRelease, qReplaceDelete, qSettle, qCharge, qKeyCharge, qRenew, qBegin, qCommit, qRollback}
	for n := 1; n <= maxRowsPerInsert; n++ {
		out = append(out, eventsInsert(n), receiptsInsert(n), factsInsert(n))
	}
	return out
}()

// wtx is the writer's transaction with its prepared statements: the
// statements of BEGIN … COMMIT run on the writer's one pinned connection,
// not in a database/sql Tx, which would start a goroutine (and wake it at
// the end) for every commit and every query in it.
type wtx struct {
	c    *sql.Conn
	st   map[string]*sql.Stmt
	rows *batchRows
}

// batchRows are the events rows and receipts a batch's writes add, put in
// with one multi-row statement each when the batch is done (or before any
// other statement that might read them): a few statements per commit, not
// two or three per write.
type batchRows struct {
	events   []any // eventCols values, 9 per row
	receipts []any // (request_id, tenant, data), 3 per row
	facts    []any // the receipts' spend facts, factWidth per row
	// charges sum what the batch's writes charge each tenant per day.
	charges map[spendKey]int64
	err     error // putting them in failed: the batch fails
}

// spendKey is one tenant's UTC day in tenant_spend, or (key) one
// virtual key's in key_spend.
type spendKey struct {
	day    int64
	tenant string
	key    bool
}

// charge adds a tenant's charge for the UTC day of at to the batch.
func (w wtx) charge(tenant string, nanoUSD int64, at time.Time) {
	if nanoUSD == 0 {
		return
	}
	if w.rows.charges == nil {
		w.rows.charges = map[spendKey]int64{}
	}
	w.rows.charges[spendKey{ledger.Day(at), tenant, false}] += nanoUSD
}

// chargeKey adds a virtual key's charge for the UTC day of at to the
// batch ("" charges nothing).
func (w wtx) chargeKey(key string, nanoUSD int64, at time.Time) {
	if nanoUSD == 0 || key == "" {
		return
	}
	if w.rows.charges == nil {
		w.rows.charges = map[spendKey]int64{}
	}
	w.rows.charges[spendKey{ledger.Day(at), key, true}] += nanoUSD
}

// Exec runs an unprepared statement after the batch's pending rows.
func (w wtx) Exec(q string, args ...any) (sql.Result, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.c.ExecContext(context.Background(), q, args...)
}

// Query runs an unprepared query after the batch's pending rows.
func (w wtx) Query(q string, args ...any) (*sql.Rows, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.c.QueryContext(context.Background(), q, args...)
}

// QueryRow runs an unprepared one-row query after the batch's pending
// rows (if putting them in fails, the batch does).
func (w wtx) QueryRow(q string, args ...any) *sql.Row {
	_ = w.flush()
	return w.c.QueryRowContext(context.Background(), q, args...)
}

// flush puts the pending rows in; an error is also kept for the batch.
func (w wtx) flush() error {
	if w.rows.err == nil {
		w.rows.err = w.put()
	}
	return w.rows.err
}

func (w wtx) put() error {
	if err := w.putRows(&w.rows.events, 9, eventsInsert); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if err := w.putRows(&w.rows.receipts, 3, receiptsInsert); err != nil {
		return fmt.Errorf("receipts: %w", err)
	}
	if err := w.putRows(&w.rows.facts, factWidth, factsInsert); err != nil {
		return fmt.Errorf("spend facts: %w", err)
	}
	for k, v := range w.rows.charges {
		q := qCharge
		if k.key {
			q = qKeyCharge
		}
		if _, err := w.st[q].Exec(k.day, k.tenant, v); err != nil {
			return fmt.Errorf("tenant spend: %w", err)
		}
		delete(w.rows.charges, k)
	}
	return nil
}

// putRows inserts vals, width values a row, maxRowsPerInsert rows a
// statement, and empties it.
func (w wtx) putRows(vals *[]any, width int, insert func(rows int) string) error {
	defer func() { *vals = (*vals)[:0] }()
	for v := *vals; len(v) > 0; {
		n := min(len(v)/width, maxRowsPerInsert)
		if _, err := w.st[insert(n)].Exec(v[:width*n]...); err != nil {
			return err
		}
		v = v[width*n:]
	}
	return nil
}

// maxRowsPerInsert bounds a multi-row insert (each size up to it is
// prepared once).
const maxRowsPerInsert = 32

func eventsInsert(n int) string {
	return `INSERT INTO events (` + eventCols + `) VALUES ` + placeholders(n, 9)
}

func receiptsInsert(n int) string {
	return `INSERT INTO events (request_id, tenant, data, seq, last_seq, generation, type, at) VALUES ` +
		strings.TrimSuffix(strings.Repeat(`(?,?,?,0,0,0,'receipt',0),`, n), ",") +
		` ON CONFLICT(request_id, seq) DO UPDATE SET data = excluded.data`
}

// factWidth is how many values a row of spend facts has.
const factWidth = 13

// factsInsert writes n receipts' spend facts, replacing those of earlier
// copies of the receipts (as receiptsInsert replaces their bodies).
func factsInsert(n int) string {
	return strings.Replace(spendsql.Upsert, placeholders(1, factWidth), placeholders(n, factWidth), 1)
}

// factArgs are the spend facts of a receipt for factsInsert (nil: the
// body has none). Derived on the caller's goroutine, never the writer's.
func factArgs(tenant, requestID string, receipt []byte) []any {
	if receipt == nil {
		return nil
	}
	f, ok := ledger.ReceiptFacts(tenant, requestID, receipt)
	if !ok {
		return nil
	}
	return f.Args()
}

// finishFacts are the spend facts of a finish's receipt for factsInsert
// (nil: it has none): those its writer gave, else derived, on the
// caller's goroutine.
func finishFacts(f *ledger.Finish) []any {
	if sf, ok := f.SpendFacts(); ok {
		return sf.Args()
	}
	return nil
}

func (w wtx) exec(q string, args ...any) (sql.Result, error) {
	if st, ok := w.st[q]; ok {
		return st.Exec(args...)
	}
	return w.Exec(q, args...)
}

func (w wtx) queryRow(q string, args ...any) *sql.Row {
	if st, ok := w.st[q]; ok {
		return st.QueryRow(args...)
	}
	return w.QueryRow(q, args...)
}

// op is one queued write. apply runs inside the batch's transaction, in its
// own savepoint; done (nil for fire-and-forget) receives the outcome once
// the batch is committed.
type op struct {
	apply func(tx wtx) error
	err   error
	done  chan error
	sync  syncMode
}

// syncMode is how durable a write must be when it returns, in a store
// behind an intent log (Store.behind; any other store commits as it was
// opened).
type syncMode uint8

const (
	// syncDefault: as the store was opened — on the disk at FULL.
	syncDefault syncMode = iota
	// syncLazy: the intent log holds the write durably; the database may
	// commit it at synchronous=NORMAL.
	syncLazy
	// syncFull: on the disk when it returns, at either setting: its
	// commit syncs the WAL, and with it every commit before.
	syncFull
)

// Under load, the writer waits a little for a batch to fill before it
// commits: every commit rewrites the pages at the end of each table and
// index and syncs once, so twice the writes per commit halve that cost
// per write. It waits only while batches are large — many callers are
// writing — so a lone caller never waits.
const (
	fillWait    = 500 * time.Microsecond
	fillBusyMin = 4  // the previous batch at least this large: we are under load
	fillMax     = 64 // wait for at most this many writes
)

// loop is the writer: it takes every queued write, applies them in one
// transaction and commits once.
func (s *Store) loop() {
	defer close(s.stopped)
	batch := make([]*op, 0, maxBatch)
	prev := 0
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
		case <-s.stop:
			for {
				select {
				case o := <-s.ops:
					s.conn.Lock()
					s.commit([]*op{o})
					s.conn.Unlock()
					s.queued.Add(-1)
				default:
					return
				}
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		if prev >= fillBusyMin {
			batch = s.fill(batch, min(2*prev, fillMax))
		}
		prev = len(batch)
		// The connection is taken only to commit, never while filling
		// waits: no one waits on a lock held across a timer. (A caller
		// cannot commit past this batch meanwhile: it commits by itself
		// only when nothing is queued, and this batch still counts.)
		s.conn.Lock()
		s.commit(batch)
		s.conn.Unlock()
		s.queued.Add(-int64(len(batch)))
	}
}

// fill adds queued writes to batch until it holds want or fillWait has
// passed.
func (s *Store) fill(batch []*op, want int) []*op {
	if len(batch) >= want {
		return batch
	}
	t := time.NewTimer(fillWait)
	defer t.Stop()
	for len(batch) < want {
		select {
		case o := <-s.ops:
			batch = append(batch, o)
		case <-t.C:
			return batch
		case <-s.stop:
			return batch
		}
	}
	return batch
}

// commit applies a batch in one transaction and commits once. Operations
// check before they write, so an expected refusal (a fenced-off
// generation) leaves nothing behind; an unexpected failure mid-write rolls
// the batch back and replays its operations one transaction each, so one
// bad write can never take another's with it.
func (s *Store) commit(batch []*op) {
	err := s.apply(batch)
	if errors.Is(err, errReplay) {
		for _, o := range batch {
			o.err = nil
			if e := s.apply([]*op{o}); e != nil && !errors.Is(e, errReplay) {
				o.err = e
			}
		}
		err = nil
	}
	for _, o := range batch {
		if o.done == nil {
			continue
		}
		if err != nil {
			o.done <- fmt.Errorf("ledger commit: %w", err)
		} else {
			o.done <- o.err
		}
	}
}

// errReplay asks commit to replay a batch one operation at a time.
var errReplay = errors.New("ledger: replay the batch one by one")

// clean reports whether an operation's error left no partial writes
// (a key's writes, too, check before they write).
func clean(err error) bool {
	return err == nil || errors.Is(err, ledger.ErrStaleGeneration) || errors.Is(err, ledger.ErrFinished) || errors.Is(err, ledger.ErrNotFound) ||
		errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrKeyRevoked) || errors.Is(err, ledger.ErrKeyExists)
}

func (s *Store) apply(batch []*op) error {
	if err := s.setSync(batch); err != nil {
		return err
	}
	if _, err := s.stmts[qBegin].Exec(); err != nil {
		return err
	}
	s.rows = batchRows{events: s.rows.events[:0], receipts: s.rows.receipts[:0], facts: s.rows.facts[:0], charges: s.rows.charges}
	clear(s.rows.charges)
	w := wtx{s.wc, s.stmts, &s.rows}
	for _, o := range batch {
		if o.err = o.apply(w); !clean(o.err) || s.rows.err != nil {
			s.rollback()
			if len(batch) > 1 {
				return errReplay
			}
			if o.err == nil {
				o.err = s.rows.err
			}
			return nil // o.err says what failed; nothing was committed
		}
	}
	if err := w.flush(); err != nil {
		s.rollback()
		if len(batch) > 1 {
			return errReplay // find whose rows they were
		}
		batch[0].err = err
		return nil
	}
	if _, err := s.stmts[qCommit].Exec(); err != nil {
		// A COMMIT that failed may leave the transaction open (SQLITE_BUSY
		// does): end it, so the next batch starts from a clean connection.
		s.rollback()
		return err
	}
	select {
	case s.committed <- struct{}{}:
	default:
	}
	return nil
}

// setSync sets the writer's synchronous for batch in a store behind a
// log: FULL if any of its writes must be on the disk when it returns,
// else NORMAL (s.conn held).
func (s *Store) setSync(batch []*op) error {
	if !s.behind {
		return nil
	}
	full := false
	for _, o := range batch {
		if o.sync == syncFull || o.sync == syncDefault && s.fullByDefault {
			full = true
			break
		}
	}
	if full == s.connFull {
		return nil
	}
	q := qSyncNormal
	if full {
		q = qSyncFull
	}
	if _, err := s.wc.ExecContext(context.Background(), q); err != nil {
		return fmt.Errorf("set synchronous: %w", err)
	}
	s.connFull = full
	return nil
}

// rollback ends the open transaction, if any (its error is that there
// was none, or one SQLite already rolled back).
func (s *Store) rollback() { _, _ = s.stmts[qRollback].Exec() }

// write queues apply and, when wait, blocks until it is committed. A
// caller that would wait alone — nothing queued, nobody writing — commits
// its write itself: handing it to the writer and being woken again would
// add two goroutine switches to the one commit it waits for. Anything
// this caller queued before is still queued then, so its writes stay in
// order.
func (s *Store) write(ctx context.Context, wait bool, apply func(tx wtx) error) error {
	return s.writeSync(ctx, wait, syncDefault, apply)
}

// writeSync is write with the durability mode asks of its commit (a store
// behind a log; see syncMode).
func (s *Store) writeSync(ctx context.Context, wait bool, mode syncMode, apply func(tx wtx) error) error {
	if s.w == nil {
		return ledger.ErrReadOnly
	}
	o := &op{apply: apply, sync: mode}
	if wait && s.queued.Load() == 0 && s.conn.TryLock() {
		if s.queued.Load() == 0 {
			select {
			case <-s.stop:
				s.conn.Unlock()
				return errors.New("ledger: closed")
			default:
			}
			o.done = make(chan error, 1)
			s.commit([]*op{o})
			s.conn.Unlock()
			return <-o.done
		}
		s.conn.Unlock()
	}
	if wait {
		o.done = make(chan error, 1)
	}
	s.queued.Add(1)
	select {
	case s.ops <- o:
	case <-s.stop:
		s.queued.Add(-1)
		return errors.New("ledger: closed")
	case <-ctx.Done():
		s.queued.Add(-1)
		return ctx.Err()
	}
	if !wait {
		return nil
	}
	// The write is queued and will commit: wait for it even if ctx ends,
	// so that a caller never mistakes a durable write for a lost one.
	return <-o.done
}

// placeholders is n rows of k parameters: "(?,?),(?,?)" (k > 1) or
// "?,?" (k == 1).
func placeholders(n, k int) string {
	row := "?"
	if k > 1 {
		row = "(?" + strings.Repeat(",?", k-1) + ")"
	}
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}
