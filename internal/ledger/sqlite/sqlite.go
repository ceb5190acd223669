// Package sqlite is the embedded ledger backend: a pure-Go SQLite database
// in WAL mode with full durability (synchronous=FULL). One writer
// goroutine group-commits every queued write in one transaction, so many
// requests share one fsync; reads go to a separate pool of WAL readers.
package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger"
)

// migrations are applied in order, once each; the schema version is the
// number applied.
var migrations = []string{
	`CREATE TABLE requests (
		identity       TEXT PRIMARY KEY,
		request_id     TEXT NOT NULL UNIQUE,
		tenant         TEXT NOT NULL,
		operation      TEXT NOT NULL,
		request_sha256 TEXT NOT NULL,
		stream         INTEGER NOT NULL,
		state          TEXT NOT NULL,
		owner          TEXT NOT NULL,
		generation     INTEGER NOT NULL,
		lease_until    INTEGER NOT NULL,
		created_at     INTEGER NOT NULL,
		finished_at    INTEGER NOT NULL DEFAULT 0,
		response       BLOB
	);
	CREATE INDEX requests_unfinished ON requests(state) WHERE state = 'in_progress';
	CREATE INDEX requests_finished_at ON requests(finished_at) WHERE state != 'in_progress';
	CREATE TABLE events (
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB,
		PRIMARY KEY (request_id, seq)
	) WITHOUT ROWID;
	CREATE TABLE stale_events (
		request_id TEXT NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB
	);
	CREATE TABLE receipts (
		request_id TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		body       BLOB NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX receipts_by_tenant ON receipts(tenant, request_id);
	CREATE TABLE meta (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;`,

	// 2: events and receipts are stored in the order they are written, with
	// their keys in small indexes. Keyed by request id, a request's events
	// and its receipt arrive after those of requests that started later,
	// so their rows landed mid-tree, splitting pages left two-thirds empty
	// and dirtying a random page per row in every commit.
	`CREATE TABLE events_v2 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		data       BLOB
	);
	INSERT INTO events_v2 (request_id, seq, generation, type, at, data)
		SELECT request_id, seq, generation, type, at, data FROM events ORDER BY request_id, seq;
	DROP TABLE events;
	ALTER TABLE events_v2 RENAME TO events;
	CREATE UNIQUE INDEX events_by_request ON events(request_id, seq);
	CREATE TABLE receipts_v2 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		tenant     TEXT NOT NULL,
		body       BLOB NOT NULL
	);
	INSERT INTO receipts_v2 (request_id, tenant, body) SELECT request_id, tenant, body FROM receipts ORDER BY request_id;
	DROP TABLE receipts;
	ALTER TABLE receipts_v2 RENAME TO receipts;
	CREATE UNIQUE INDEX receipts_by_id ON receipts(request_id);
	CREATE INDEX receipts_by_tenant ON receipts(tenant, request_id);`,

	// 3: fewer B-trees and rows per request, so a commit rewrites fewer
	// pages (each B-tree a commit touches costs a page; a request's two
	// commits wrote 19 before). One write's events share a row (see
	// events.go); the receipt is a row of the events table (seq 0) found
	// by the events index, listed by a partial index of receipts alone;
	// one index on finished_at (0 while in progress) replaces the partial
	// indexes of unfinished and of finished records.
	`CREATE TABLE events_v3 (
		id         INTEGER PRIMARY KEY,
		request_id TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		last_seq   INTEGER NOT NULL,
		generation INTEGER NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		dispatched INTEGER NOT NULL DEFAULT 0,
		observed   INTEGER NOT NULL DEFAULT 0,
		tenant     TEXT,
		data       BLOB
	);
	INSERT INTO events_v3 (request_id, seq, last_seq, generation, type, at, dispatched, observed, data)
		SELECT request_id, seq, seq, generation, type, at, type = 'attempt_dispatched', type = 'attempt_observed', data FROM events ORDER BY id;
	INSERT INTO events_v3 (request_id, seq, last_seq, generation, type, at, tenant, data)
		SELECT request_id, 0, 0, 0, 'receipt', 0, tenant, body FROM receipts ORDER BY id;
	DROP TABLE events;
	DROP TABLE receipts;
	ALTER TABLE events_v3 RENAME TO events;
	CREATE UNIQUE INDEX events_by_request ON events(request_id, seq);
	CREATE UNIQUE INDEX receipts_by_tenant ON events(tenant, request_id) WHERE seq = 0;
	DROP INDEX requests_unfinished;
	DROP INDEX requests_finished_at;
	CREATE INDEX requests_by_finish ON requests(finished_at);`,
}

// maxBatch bounds how many queued writes share one commit.
const maxBatch = 1024

// Store is the SQLite ledger. It is safe for concurrent use.
type Store struct {
	w         *sql.DB // the single writer connection
	r         *sql.DB // WAL readers
	cp        *sql.DB // the checkpointer
	committed chan struct{}
	cpStopped chan struct{}
	stmts     map[string]*sql.Stmt
	ops       chan *op
	// conn is held by whoever is writing: the writer goroutine, or a
	// caller committing its own write when nothing else is queued.
	conn sync.Mutex
	// queued counts writes handed to the writer and not yet committed.
	queued  atomic.Int64
	rows    batchRows // the open batch's pending rows (under conn)
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

var _ ledger.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and migrates it.
func Open(path string) (*Store, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(OFF)", "cache_size(-8192)"} {
		q.Add("_pragma", p)
	}
	if err := registerWALVFS(); err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	q.Set("vfs", walVFSName)
	dsn := "file:" + path + "?" + q.Encode()
	// The writer never checkpoints: a background connection does (see
	// checkpoints), so the one goroutine every commit waits on only
	// commits.
	w, err := sql.Open("sqlite", dsn+"&_txlock=immediate&"+url.Values{"_pragma": {"wal_autocheckpoint(0)"}}.Encode())
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	if err := migrate(w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("migrate ledger %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open ledger readers %s: %w", path, err)
	}
	r.SetMaxOpenConns(8)
	cp, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("open ledger checkpointer %s: %w", path, err)
	}
	cp.SetMaxOpenConns(1)
	s := &Store{w: w, r: r, cp: cp, ops: make(chan *op, 4096), stop: make(chan struct{}), stopped: make(chan struct{}),
		stmts: map[string]*sql.Stmt{}, committed: make(chan struct{}, 1), cpStopped: make(chan struct{})}
	for _, q := range writes {
		st, err := w.Prepare(q)
		if err != nil {
			_ = w.Close()
			_ = r.Close()
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		s.stmts[q] = st
	}
	go s.loop()
	go s.checkpoints()
	return s, nil
}

// checkpointEvery is how often the background checkpointer copies the WAL
// into the database while commits keep coming. A checkpoint copies each
// page once however many commits rewrote it, so a longer interval copies
// less: at 100 ms the checkpointer costs about 10 µs of CPU per request
// under the load benchmark, at 20 ms 45 µs. (How long the WAL grows
// between checkpoints is restartEvery's business.)
const checkpointEvery = 100 * time.Millisecond

// restartEvery is how often a checkpoint finishes with the pass that holds
// the writer off to start the WAL over (see checkpoint). That pass stalls
// every commit for one to several milliseconds — it syncs the WAL and the
// database, however few frames it copies — so it runs at every fifth
// checkpoint, not every one; the WAL then holds up to half a second of
// commits (about 40 MB under the load benchmark) before it starts over.
const restartEvery = 5 * checkpointEvery

// checkpoints copies committed WAL frames into the database file in the
// background, so that the WAL stays short: once everything in it is
// checkpointed, the next commit starts it over from its beginning.
func (s *Store) checkpoints() {
	defer close(s.cpStopped)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	restarted := time.Now()
	for {
		select {
		case <-s.stop:
			_, _ = s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
			return
		case <-s.committed:
			<-t.C
			restart := time.Since(restarted) >= restartEvery
			s.checkpoint(restart)
			if restart {
				restarted = time.Now()
			}
		}
	}
}

// checkpoint copies the WAL into the database, in a second pass too when
// restart. The first runs beside the writer (PASSIVE: it never blocks a
// writer or a reader) and copies nearly everything; but commits land
// while it runs, and a WAL with frames left over is never started over —
// each commit appends to it, so it grows for as long as traffic lasts (by
// 40 MB in five seconds under load), with a longer replay after a crash.
// The second pass holds the writer off while it copies the few frames the
// first missed, so the next commit finds the WAL fully checkpointed and
// writes over it from the start. A pass that cannot run now runs at the
// next tick.
func (s *Store) checkpoint(restart bool) {
	if _, err := s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil || !restart {
		return
	}
	s.conn.Lock()
	defer s.conn.Unlock()
	_, _ = s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
}

// The writer's statements, prepared once on its one connection: compiling
// SQL on every write would cost more than the writes.
const (
	qInsertRecord = `INSERT INTO requests (` + recordCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL) ON CONFLICT(identity) DO NOTHING`
	qSelectByID   = `SELECT ` + recordCols + ` FROM requests WHERE identity = ?`
	qInsertStale  = `INSERT INTO stale_events (request_id, generation, type, at, data) VALUES (?,?,?,?,?)`
	qFence        = `SELECT generation, state FROM requests WHERE request_id = ?`
	qFinish       = `UPDATE requests SET state = ?, finished_at = ?, response = ?, generation = ? WHERE request_id = ? AND generation = ? AND state = 'in_progress'`
	qRelease      = `DELETE FROM requests WHERE request_id = ? AND generation = ? AND state = 'in_progress'`
	qSettle       = `UPDATE requests SET state = ?, finished_at = ?, generation = ? WHERE request_id = ?`
)

var writes = func() []string {
	out := []string{qInsertRecord, qSelectByID, qInsertStale, qFence, qFinish, qRelease, qSettle}
	for n := 1; n <= maxRowsPerInsert; n++ {
		out = append(out, eventsInsert(n), receiptsInsert(n))
	}
	return out
}()

// wtx is the writer's transaction with its prepared statements.
type wtx struct {
	*sql.Tx
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
	err      error // putting them in failed: the batch fails
}

// Exec runs an unprepared statement after the batch's pending rows.
func (w wtx) Exec(q string, args ...any) (sql.Result, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.Tx.Exec(q, args...)
}

// Query runs an unprepared query after the batch's pending rows.
func (w wtx) Query(q string, args ...any) (*sql.Rows, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.Tx.Query(q, args...)
}

// QueryRow runs an unprepared one-row query after the batch's pending
// rows (if putting them in fails, the batch does).
func (w wtx) QueryRow(q string, args ...any) *sql.Row {
	_ = w.flush()
	return w.Tx.QueryRow(q, args...)
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
	return nil
}

// putRows inserts vals, width values a row, maxRowsPerInsert rows a
// statement, and empties it.
func (w wtx) putRows(vals *[]any, width int, insert func(rows int) string) error {
	defer func() { *vals = (*vals)[:0] }()
	for v := *vals; len(v) > 0; {
		n := min(len(v)/width, maxRowsPerInsert)
		if _, err := w.Tx.Stmt(w.st[insert(n)]).Exec(v[:width*n]...); err != nil {
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

func (w wtx) exec(q string, args ...any) (sql.Result, error) {
	if st, ok := w.st[q]; ok {
		return w.Stmt(st).Exec(args...)
	}
	return w.Exec(q, args...)
}

func (w wtx) queryRow(q string, args ...any) *sql.Row {
	if st, ok := w.st[q]; ok {
		return w.Stmt(st).QueryRow(args...)
	}
	return w.QueryRow(q, args...)
}

func migrate(db *sql.DB) error {
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	if err := db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return err
	}
	for i := v; i < len(migrations); i++ {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(migrations[i]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_version (version) VALUES (?)`, i+1); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// op is one queued write. apply runs inside the batch's transaction, in its
// own savepoint; done (nil for fire-and-forget) receives the outcome once
// the batch is committed.
type op struct {
	apply func(tx wtx) error
	err   error
	done  chan error
}

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
		s.conn.Lock()
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

// clean reports whether an operation's error left no partial writes.
func clean(err error) bool {
	return err == nil || errors.Is(err, ledger.ErrStaleGeneration) || errors.Is(err, ledger.ErrFinished) || errors.Is(err, ledger.ErrNotFound)
}

func (s *Store) apply(batch []*op) error {
	tx, err := s.w.Begin()
	if err != nil {
		return err
	}
	s.rows = batchRows{events: s.rows.events[:0], receipts: s.rows.receipts[:0]}
	w := wtx{tx, s.stmts, &s.rows}
	for _, o := range batch {
		if o.err = o.apply(w); !clean(o.err) || s.rows.err != nil {
			_ = tx.Rollback()
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
		_ = tx.Rollback()
		if len(batch) > 1 {
			return errReplay // find whose rows they were
		}
		batch[0].err = err
		return nil
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	select {
	case s.committed <- struct{}{}:
	default:
	}
	return nil
}

// write queues apply and, when wait, blocks until it is committed. A
// caller that would wait alone — nothing queued, nobody writing — commits
// its write itself: handing it to the writer and being woken again would
// add two goroutine switches to the one commit it waits for. Anything
// this caller queued before is still queued then, so its writes stay in
// order.
func (s *Store) write(ctx context.Context, wait bool, apply func(tx wtx) error) error {
	o := &op{apply: apply}
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

// Close commits what is queued and closes the database.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.stopped
	<-s.cpStopped
	s.conn.Lock() // a caller committing its own write finishes it
	defer s.conn.Unlock()
	return errors.Join(s.w.Close(), s.r.Close(), s.cp.Close())
}

func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

const recordCols = `identity, request_id, tenant, operation, request_sha256, stream, state, owner, generation, lease_until, created_at, finished_at, response`

type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (*ledger.Record, error) {
	var r ledger.Record
	var stream int
	var lease, created, finished int64
	var resp []byte
	if err := row.Scan(&r.Identity, &r.RequestID, &r.Tenant, &r.Operation, &r.RequestSHA256, &stream, &r.State,
		&r.Owner, &r.Generation, &lease, &created, &finished, &resp); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ledger.ErrNotFound
		}
		return nil, err
	}
	r.Stream, r.LeaseUntil, r.CreatedAt, r.FinishedAt = stream == 1, fromNS(lease), fromNS(created), fromNS(finished)
	if len(resp) > 0 {
		var err error
		if r.Response, err = decodeResponse(resp); err != nil {
			return nil, fmt.Errorf("stored response of %s: %w", r.RequestID, err)
		}
	}
	return &r, nil
}

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
		res, err := tx.Exec(`DELETE FROM requests WHERE identity = ? AND request_id = ?`, rec.Identity, prev)
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
		if resp, err = encodeResponse(f.Response); err != nil {
			return fmt.Errorf("encode the stored response of %s: %w", f.RequestID, err)
		}
	}
	evArgs := eventArgs(f.Events)
	return s.write(ctx, true, func(tx wtx) error { return finish(tx, f, resp, evArgs) })
}

func finish(tx wtx, f *ledger.Finish, resp []byte, evArgs []any) error {
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
	}
	return nil
}

// Settle finishes many requests in one commit (recovery). Rows are written
// 500 at a time with multi-row statements, each still fenced by its own
// generation: a row another owner moved on is left alone, its events and
// receipt with it.
func (s *Store) Settle(ctx context.Context, fs []*ledger.Finish) error {
	return s.write(ctx, true, func(tx wtx) error {
		for start := 0; start < len(fs); start += settleChunk {
			if err := settleChunkOf(tx, fs[start:min(start+settleChunk, len(fs))]); err != nil {
				return err
			}
		}
		return nil
	})
}

const settleChunk = 500

func settleChunkOf(tx wtx, fs []*ledger.Finish) error {
	// Which rows are still at the generation recovery read? Only those
	// are settled. (Plain IN on the unique request_id: the index is used.)
	ids := make([]any, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.RequestID)
	}
	// The state is checked here, not in SQL: with it the planner prefers
	// the partial index of unfinished rows and scans all of them.
	rows, err := tx.Query(`SELECT request_id, generation, state FROM requests WHERE request_id IN (`+placeholders(len(fs), 1)+`)`, ids...)
	if err != nil {
		return err
	}
	gens := map[string]int64{}
	for rows.Next() {
		var id, state string
		var gen int64
		if err := rows.Scan(&id, &gen, &state); err != nil {
			rows.Close()
			return err
		}
		if ledger.State(state) == ledger.InProgress {
			gens[id] = gen
		}
	}
	rows.Close()
	var del, evs, rcs []any
	nDel, nEv, nRc := 0, 0, 0
	for _, f := range fs {
		if gen, ok := gens[f.RequestID]; !ok || gen != f.Generation {
			continue // another owner moved it on
		}
		if f.Release {
			del = append(del, f.RequestID)
			nDel++
		} else {
			gen := f.Generation
			if f.Takeover {
				gen++
			}
			if _, err := tx.exec(qSettle, string(f.State), ns(f.At), gen, f.RequestID); err != nil {
				return err
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
		}
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
	}
	for _, st := range stmts {
		if st.n == 0 {
			continue
		}
		if _, err := tx.Exec(st.q, st.args...); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
	}
	return nil
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

// SettleUnfinished settles every other owner's in-progress request with
// set-based statements: classification, terminal events, states and
// releases in one commit, whatever the number.
func (s *Store) SettleUnfinished(ctx context.Context, owner string, at time.Time) ([]string, error) {
	var ids []string
	err := s.write(ctx, true, func(tx wtx) error {
		steps := []struct {
			q    string
			args []any
		}{
			{`DROP TABLE IF EXISTS temp.settle`, nil},
			{`CREATE TEMP TABLE settle AS SELECT r.request_id AS id, r.generation AS gen,
				COALESCE(SUM(e.dispatched), 0) > COALESCE(SUM(e.observed), 0) AS pending,
				COALESCE(MAX(e.last_seq), 0) AS seq
				FROM requests r LEFT JOIN events e ON e.request_id = r.request_id AND e.seq > 0
				WHERE r.finished_at = 0 AND r.state = 'in_progress' AND r.owner != ? GROUP BY r.request_id`, []any{owner}},
			{`INSERT INTO events (request_id, seq, last_seq, generation, type, at, data)
				SELECT id, seq + 1, seq + 1, gen, 'terminal_committed', ?,
				CASE WHEN pending THEN '{"by":"recovery","reason":"indeterminate","terminal":"indeterminate"}'
				ELSE '{"by":"recovery","reason":"cancelled","terminal":"cancelled"}' END FROM temp.settle`, []any{ns(at)}},
			{`UPDATE requests SET state = 'indeterminate', finished_at = ?, generation = generation + 1
				WHERE request_id IN (SELECT id FROM temp.settle WHERE pending)`, []any{ns(at)}},
			{`DELETE FROM requests WHERE request_id IN (SELECT id FROM temp.settle WHERE NOT pending)`, nil},
		}
		for _, st := range steps {
			if _, err := tx.Exec(st.q, st.args...); err != nil {
				return fmt.Errorf("settle unfinished: %w", err)
			}
		}
		rows, err := tx.Query(`SELECT id FROM temp.settle`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = tx.Exec(`DROP TABLE temp.settle`)
		return err
	})
	slices.Sort(ids)
	return ids, err
}

// PutReceipt stores a receipt unless one exists.
func (s *Store) PutReceipt(ctx context.Context, tenant, requestID string, body []byte) error {
	return s.write(ctx, false, func(tx wtx) error {
		_, err := tx.Exec(`INSERT INTO events (request_id, seq, last_seq, generation, type, at, tenant, data) VALUES (?,0,0,0,'receipt',0,?,?)
			ON CONFLICT(request_id, seq) DO NOTHING`, requestID, tenant, body)
		return err
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

// Get returns the record for identity.
func (s *Store) Get(ctx context.Context, identity string) (*ledger.Record, error) {
	return scanRecord(s.r.QueryRowContext(ctx, `SELECT `+recordCols+` FROM requests WHERE identity = ?`, identity))
}

// Renew extends owner's leases.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	return s.write(ctx, true, func(tx wtx) error {
		_, err := tx.Exec(`UPDATE requests SET lease_until = ? WHERE finished_at = 0 AND owner = ? AND state = 'in_progress'`, ns(until), owner)
		return err
	})
}

// Unfinished lists in-progress records of other owners with their events.
func (s *Store) Unfinished(ctx context.Context, owner string) ([]ledger.Unfinished, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+recordCols+` FROM requests WHERE finished_at = 0 AND state = 'in_progress' AND owner != ?`, owner)
	if err != nil {
		return nil, err
	}
	var out []ledger.Unfinished
	index := map[string]int{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		index[r.RequestID] = len(out)
		out = append(out, ledger.Unfinished{Record: r})
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, err
	}
	evRows, err := s.r.QueryContext(ctx, `SELECT e.request_id, e.seq, e.generation, e.type, e.at, e.data FROM events e
		JOIN requests r ON r.request_id = e.request_id WHERE r.finished_at = 0 AND r.state = 'in_progress' AND r.owner != ? AND e.seq > 0
		ORDER BY e.request_id, e.seq`, owner)
	if err != nil {
		return nil, err
	}
	defer evRows.Close()
	for evRows.Next() {
		evs, err := scanEvents(evRows)
		if err != nil {
			return nil, err
		}
		if i, ok := index[evs[0].RequestID]; ok {
			out[i].Events = append(out[i].Events, evs...)
		}
	}
	return out, evRows.Err()
}

// scanEvents reads one row of (request_id, seq, generation, type, at,
// data) as its events.
func scanEvents(row scanner) ([]ledger.Event, error) {
	var id, typ string
	var seq, gen, at int64
	var data []byte
	if err := row.Scan(&id, &seq, &gen, &typ, &at, &data); err != nil {
		return nil, err
	}
	return expandRow(id, seq, gen, typ, at, data)
}

// Events returns a request's events in order.
func (s *Store) Events(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, seq, generation, type, at, data FROM events WHERE request_id = ? AND seq > 0 ORDER BY seq`, requestID)
}

// StaleEvents returns the writes fenced off for a request (evidence).
func (s *Store) StaleEvents(ctx context.Context, requestID string) ([]ledger.Event, error) {
	return s.events(ctx, `SELECT request_id, 0, generation, type, at, data FROM stale_events WHERE request_id = ?`, requestID)
}

func (s *Store) events(ctx context.Context, q string, args ...any) ([]ledger.Event, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.Event
	for rows.Next() {
		evs, err := scanEvents(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, rows.Err()
}

// Receipt returns a tenant's receipt.
func (s *Store) Receipt(ctx context.Context, tenant, requestID string) ([]byte, error) {
	var body []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM events WHERE request_id = ? AND seq = 0 AND tenant = ?`, requestID, tenant).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ledger.ErrNotFound
	}
	return body, err
}

// Receipts lists a tenant's receipts after `after`.
func (s *Store) Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT data FROM events WHERE tenant = ? AND seq = 0 AND request_id > ? ORDER BY request_id LIMIT ?`, tenant, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
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
