package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// LogStore is the SQLite ledger with an intent log in front of it
// (docs/durability.md, "An intent log in front of SQLite"): Claim, Append and Finish are
// records appended to the log, group-committed, and return once their
// record is durable as the store's sync setting says; one goroutine
// applies the records to the database behind, a batch a transaction, with
// the log position it reached — at synchronous=NORMAL: the log holds them
// durably, and a log file goes only once a commit that syncs the database
// covers it. What those writes must check — one creation
// per identity, the generation fence, a finish only once — is checked
// against an index in memory of every request not yet finished and
// applied. Every other call first waits until the database has applied
// everything appended before it, then runs against the database.
//
// It is safe for concurrent use.
type LogStore struct {
	db   *Store
	get  *sql.Stmt // the record of an identity, prepared on the readers
	path string
	sync bool

	// seg is held to read by every append and to write by a segment
	// change: a segment's last LSN is known once no append is in it.
	seg      sync.RWMutex
	log      *intentlog.Log
	segNo    int
	rotating atomic.Bool
	segLimit int64        // segmentBytes; smaller in tests
	lsn      atomic.Int64 // the last LSN handed out

	ids  [64]idShard
	reqs [64]reqShard
	seed maphash.Seed
	// forgotten counts the records deleted from the database since the
	// set of identities it may hold was built; rebuild is held by a
	// rebuild (logknown.go).
	forgotten atomic.Int64
	rebuild   sync.Mutex
	// purge is held by a direct delete of finished records (deleting)
	// and, to read, by a Replace from its check to its append.
	purge sync.RWMutex
	// purges counts the starts and ends of such deletes: odd while one
	// runs (a Claim's read then leaves no hint; see abandonSeen).
	purges atomic.Int64

	amu       sync.Mutex
	pending   map[int64][]byte // durable records not yet applied, by LSN
	applied   int64            // the last LSN the database has applied
	taken     int64            // the last LSN the applier has taken from pending
	urgent    atomic.Bool      // someone waits for the database: apply now
	idle      bool             // the applier sleeps with nothing pending: the next append wakes it
	appliedCh chan struct{}    // closed (and replaced) when applied grows
	broken    error            // the log or the database failed: nothing more is written
	old       []segment        // segments whose records are all appended
	refused   int              // records the database refused when applied (see Refused)
	wake      chan struct{}
	stop      chan struct{}
	stopped   chan struct{}
	closed    bool
}

var _ ledger.Store = (*LogStore)(nil)

// segment is a log file no longer appended to.
type segment struct {
	path string
	last int64 // its records' highest LSN
}

// segmentBytes is how large a log segment grows before the next one is
// started: the one before it is deleted once the database has applied
// its records and synced them (LogStore.apply).
const segmentBytes = 64 << 20

// maxLag is how many records the database may lag the log by before an
// append waits for it.
const maxLag = 16384

// OpenLog opens (creating if needed) the database at path to write, with
// its intent log in the files path + ".log.N" beside it. It holds the
// database's lock as OpenWith does, applies the records the log holds past
// the database's position, ends the leases of the process before (as
// OpenWith does) and rebuilds the index of unfinished requests.
func OpenLog(path string, o Options) (*LogStore, error) {
	o.behind = true
	db, err := openLocked(path, o)
	if err != nil {
		return nil, err
	}
	s := &LogStore{db: db, path: path, sync: !o.SyncNormal, segLimit: segmentBytes, seed: maphash.MakeSeed(), pending: map[int64][]byte{},
		appliedCh: make(chan struct{}), wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	for i := range s.ids {
		s.ids[i].m = map[string]*entry{}
		s.reqs[i].m = map[string]*entry{}
	}
	if s.get, err = db.r.Prepare(`SELECT ` + recordCols + ` FROM requests WHERE identity = ?`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	if err := s.recover(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	go s.applier()
	return s, nil
}

// segments lists the log's files, oldest first.
func segments(path string) ([]string, []int, error) {
	matches, err := filepath.Glob(path + ".log.*")
	if err != nil {
		return nil, nil, err
	}
	var out []string
	var nums []int
	for _, m := range matches {
		n, err := strconv.Atoi(strings.TrimPrefix(m, path+".log."))
		if err != nil {
			continue
		}
		out, nums = append(out, m), append(nums, n)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return nums[a] - nums[b] })
	so, sn := make([]string, len(out)), make([]int, len(out))
	for i, j := range idx {
		so[i], sn[i] = out[j], nums[j]
	}
	return so, sn, nil
}

// recover applies the log past the database's position, starts a new
// segment (deleting the old ones, all applied) and rebuilds the index.
// A log that is corrupt (logscan.go) is refused before anything is
// written: the error names the file and the byte offset, and every file
// stays as it is.
func (s *LogStore) recover(ctx context.Context) error {
	applied, err := s.db.appliedLSN(ctx)
	if err != nil {
		return err
	}
	ls, err := scanLog(s.path, applied)
	if err != nil {
		return fmt.Errorf("read the intent log: %w", err)
	}
	if err := ls.err(); err != nil {
		return fmt.Errorf("%w (every file of the log is kept as it is)", err)
	}
	next := ls.next
	last, refused, err := s.db.replayLog(ctx, ls.recs, applied)
	if err != nil {
		return fmt.Errorf("replay the intent log: %w", err)
	}
	if err := s.db.endLeases(); err != nil {
		return err
	}
	// What the log held is in the database now; once it is on the disk
	// too, the log's files go.
	files, _, err := segments(s.path)
	if err != nil {
		return err
	}
	if len(files) > 0 {
		if err := s.db.syncNow(ctx); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("remove applied log segment: %w", err)
		}
	}
	s.lsn.Store(last)
	s.applied, s.taken, s.refused, s.segNo = last, last, refused, next
	if s.log, err = s.openSegment(next); err != nil {
		return err
	}
	return s.loadIndex(ctx)
}

func (s *LogStore) openSegment(n int) (*intentlog.Log, error) {
	l, _, err := intentlog.Open(s.path+".log."+strconv.Itoa(n), intentlog.Options{Sync: s.sync}, func([]byte) error { return nil })
	return l, err
}

// Refused counts the records the database refused when it applied them
// since the store was opened (replay included): writes the index admitted
// and the database then fenced off. It is always 0 unless the index and
// the database disagree — a bug the tests look for.
func (s *LogStore) Refused() int {
	s.amu.Lock()
	defer s.amu.Unlock()
	return s.refused
}

// appendRecord gives rec the next LSN, appends it and returns once it is
// durable; the applier then has it. A failed append breaks the store: the
// log fails every later append too.
func (s *LogStore) appendRecord(rec []byte) (int64, error) {
	if len(rec) > intentlog.MaxRecord {
		return 0, intentlog.ErrTooLarge
	}
	if err := s.failed(); err != nil {
		return 0, err
	}
	// The database may lag the log, not without bound: memory holds what
	// it has not applied.
	if lag := s.lsn.Load() - maxLag; lag > 0 {
		if err := s.waitApplied(context.Background(), lag); err != nil {
			return 0, err
		}
	}
	s.seg.RLock()
	if s.closed {
		s.seg.RUnlock()
		return 0, intentlog.ErrClosed
	}
	// The LSN is stamped under the log's lock: LSNs follow the order of
	// the records in the file, which is what lets a gap in them, or one
	// out of order, be told from a torn tail (logscan.go).
	var lsn int64
	err := s.log.AppendStamped(func() {
		lsn = s.lsn.Add(1)
		setLSN(rec, lsn)
	}, rec)
	full := err == nil && s.log.Size() > s.segLimit
	s.seg.RUnlock()
	if err != nil {
		s.fail(fmt.Errorf("intent log append: %w", err))
		return 0, err
	}
	s.amu.Lock()
	s.pending[lsn] = rec
	// The applier is woken by a record when it sleeps with nothing to
	// apply (it then waits applyDelay for more) and by a batch's worth:
	// not by every append.
	wake := s.idle || len(s.pending) == applyBatch
	s.idle = false
	s.amu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	if full && s.rotating.CompareAndSwap(false, true) {
		s.rotate()
		s.rotating.Store(false)
	}
	return lsn, nil
}

// rotate starts the next segment.
func (s *LogStore) rotate() {
	s.seg.Lock()
	defer s.seg.Unlock()
	if s.closed || s.log.Size() <= s.segLimit {
		return
	}
	next, err := s.openSegment(s.segNo + 1)
	if err != nil {
		s.fail(fmt.Errorf("start a log segment: %w", err))
		return
	}
	prev := s.path + ".log." + strconv.Itoa(s.segNo)
	if err := s.log.Close(); err != nil {
		s.fail(fmt.Errorf("close a log segment: %w", err))
	}
	s.log, s.segNo = next, s.segNo+1
	s.amu.Lock()
	s.old = append(s.old, segment{path: prev, last: s.lsn.Load()})
	s.amu.Unlock()
}

// fail breaks the store with err (the first error wins).
func (s *LogStore) fail(err error) {
	s.amu.Lock()
	if s.broken == nil {
		s.broken = err
		close(s.appliedCh)
		s.appliedCh = make(chan struct{})
	}
	s.amu.Unlock()
}

func (s *LogStore) failed() error {
	s.amu.Lock()
	defer s.amu.Unlock()
	return s.broken
}

// waitApplied returns once the database has applied every record up to
// lsn.
func (s *LogStore) waitApplied(ctx context.Context, lsn int64) error {
	for {
		s.amu.Lock()
		applied, broken, ch := s.applied, s.broken, s.appliedCh
		s.amu.Unlock()
		switch {
		case broken != nil:
			return fmt.Errorf("ledger: %w", broken)
		case applied >= lsn:
			return nil
		}
		s.urgent.Store(true)
		select {
		case s.wake <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// barrier returns once the database has applied everything appended
// before the call.
func (s *LogStore) barrier(ctx context.Context) error { return s.waitApplied(ctx, s.lsn.Load()) }

// The applier writes the database in large, rare transactions: each
// commit costs the same whatever it holds. It applies once applyBatch
// records have gathered, applyDelay after the first of them, or at once
// when someone waits for the database (a barrier, Close).
const (
	applyBatch = 512
	applyDelay = 10 * time.Millisecond
)

// applier applies durable records in LSN order, as many as have gathered
// a transaction, until Close. It sleeps until a record is pending, then
// gathers for applyDelay (or until a batch's worth is pending, or someone
// waits for the database): one wake-up a batch, not one a record.
func (s *LogStore) applier() {
	defer close(s.stopped)
	t := time.NewTimer(applyDelay)
	t.Stop()
	armed := false
	var batch [][]byte
	for {
		var more bool
		batch, more = s.take(batch)
		if len(batch) > 0 && (len(batch) >= applyBatch || s.urgent.Swap(false)) {
			if err := s.apply(batch); err != nil {
				s.fail(err)
				<-s.stop
				return
			}
			batch = batch[:0]
			continue
		}
		waiting := len(batch) > 0 || more
		if waiting && !armed {
			t.Reset(applyDelay)
			armed = true
		}
		select {
		case <-s.wake:
		case <-t.C:
			armed = false
			if waiting {
				s.urgent.Store(true)
			}
		case <-s.stop:
			// Close waited until everything appended was applied.
			return
		}
	}
}

// take moves to batch the records of pending that follow the last one
// taken without a gap (a record whose append has not returned yet ends
// the run), up to applyBatch; more reports records left pending. With
// none taken and none left, the applier is idle: the next append wakes
// it.
func (s *LogStore) take(batch [][]byte) ([][]byte, bool) {
	s.amu.Lock()
	defer s.amu.Unlock()
	for len(batch) < applyBatch {
		rec, ok := s.pending[s.taken+1]
		if !ok {
			break
		}
		delete(s.pending, s.taken+1)
		s.taken++
		batch = append(batch, rec)
	}
	more := len(s.pending) > 0
	s.idle = len(batch) == 0 && !more
	return batch, more
}

// apply writes a run of records to the database in one transaction, then
// drops the index entries of the requests it finished and the segments it
// has applied past.
func (s *LogStore) apply(batch [][]byte) error {
	recs := make([]*logRecord, len(batch))
	for i, b := range batch {
		lr, err := readRecord(b)
		if err != nil {
			return err
		}
		lr.factArgs()
		recs[i] = lr
	}
	last := recs[len(recs)-1].lsn
	// The database commits the log's records lazily (synchronous=NORMAL:
	// the log holds them durably), except the batch that completes a
	// segment no longer appended to: that one commits at FULL, which puts
	// it and every commit before it on the disk, and the segment can go.
	// (Only this goroutine takes segments off the front of old; rotate
	// adds them at its end.)
	s.amu.Lock()
	var done []segment
	for _, sg := range s.old {
		if sg.last > last {
			break
		}
		done = append(done, sg)
	}
	s.amu.Unlock()
	mode := syncLazy
	if len(done) > 0 {
		mode = syncFull
	}
	refused := 0
	if err := s.db.applyLog(context.Background(), recs, &refused, mode); err != nil {
		return err
	}
	s.amu.Lock()
	s.old = s.old[len(done):]
	s.amu.Unlock()
	for _, sg := range done {
		if err := os.Remove(sg.path); err != nil {
			return fmt.Errorf("remove applied log segment: %w", err)
		}
	}
	s.amu.Lock()
	s.applied, s.refused = last, s.refused+refused
	close(s.appliedCh)
	s.appliedCh = make(chan struct{})
	s.amu.Unlock()
	for _, lr := range recs {
		if lr.kind == kindFinish {
			s.dropApplied(lr.fin.RequestID)
			if lr.fin.Release {
				s.forget(1)
			}
		}
	}
	return nil
}

// Close applies what the log holds, closes the log and the database, and
// removes the log's files once all of it is applied.
func (s *LogStore) Close() error {
	s.seg.Lock()
	if s.closed {
		s.seg.Unlock()
		return intentlog.ErrClosed
	}
	s.closed = true
	last := s.lsn.Load()
	s.seg.Unlock()
	werr := s.waitApplied(context.Background(), last)
	if werr == nil {
		werr = s.db.syncNow(context.Background()) // before the log's files go
	}
	close(s.stop)
	<-s.stopped
	err := s.log.Close()
	if werr == nil && err == nil {
		files, _, ferr := segments(s.path)
		for _, f := range files {
			ferr = errors.Join(ferr, os.Remove(f))
		}
		err = ferr
	}
	return errors.Join(werr, err, s.get.Close(), s.db.Close())
}
