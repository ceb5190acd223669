// Package sqlite is the embedded ledger backend: a pure-Go SQLite database
// in WAL mode with full durability (synchronous=FULL) unless opened with
// Options.SyncNormal (docs/durability.md). One writer
// goroutine group-commits every queued write in one transaction, so many
// requests share one fsync; reads go to a separate pool of WAL readers.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Store is the SQLite ledger. It is safe for concurrent use.
type Store struct {
	w         *sql.DB   // the single writer connection (nil: read-only)
	wc        *sql.Conn // w's connection, pinned: the writer's statements run on it
	path      string    // the database file
	r         *sql.DB   // WAL readers
	cp        *sql.DB   // the checkpointer
	lock      *fileLock
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
	// behind: the database is written behind an intent log (OpenLog). Its
	// connections open at synchronous=NORMAL, and each batch commits at
	// FULL if one of its writes asks for it (see syncMode); writes that
	// do not say commit at FULL when fullByDefault. connFull is the
	// writer connection's setting now (under conn).
	behind, fullByDefault, connFull bool
	// syncSeq numbers the commits syncNow makes, so each changes a row.
	syncSeq atomic.Int64
}

var _ ledger.Store = (*Store)(nil)

// ErrLocked: another process has the database open to write.
var ErrLocked = errors.New("the ledger is in use by another oncegate process")

// Options choose how the store commits.
type Options struct {
	// SyncNormal commits with synchronous=NORMAL: a commit is in the
	// operating system's hands, not yet on the disk, when it counts. It
	// survives any crash of the process; the last commits before a power
	// loss or a kernel crash may be lost (never the database's integrity).
	// The zero value is synchronous=FULL: a commit is on the disk.
	SyncNormal bool
	// behind opens the database behind an intent log (OpenLog): at
	// synchronous=NORMAL, with the writes that must be on the disk when
	// they return committed at FULL one batch at a time (Store.behind).
	behind bool
}

func dsn(path string, o Options) (string, error) {
	q := url.Values{}
	sync := "synchronous(FULL)"
	if o.SyncNormal || o.behind {
		sync = "synchronous(NORMAL)"
	}
	for _, p := range []string{"journal_mode(WAL)", sync, "busy_timeout(10000)", "foreign_keys(OFF)", "cache_size(-8192)"} {
		q.Add("_pragma", p)
	}
	if err := registerWALVFS(); err != nil {
		return "", err
	}
	q.Set("vfs", walVFSName)
	return "file:" + path + "?" + q.Encode(), nil
}

// Open opens (creating if needed) the database at path to write, and
// migrates it. One process at a time may: Open holds an exclusive lock on
// path + ".lock" until Close (the kernel drops it if the process dies),
// and fails with ErrLocked while another process holds it. So a second
// gateway started by mistake on the same file stops before it touches
// anything — and every request still in progress in the database belongs
// to a process that is gone: Open ends their leases, for recovery to
// settle at once (docs/identity.md).
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with the commits o chooses. An intent log left beside
// the database by a LogStore that stopped (OpenLog) is applied first:
// what it acknowledged is in the database before anyone writes it
// directly. A corrupt one is refused, as OpenLog refuses it.
func OpenWith(path string, o Options) (*Store, error) {
	if files, _, err := segments(path); err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	} else if len(files) > 0 {
		ls, err := OpenLog(path, o)
		if err != nil {
			return nil, fmt.Errorf("open ledger %s: apply its intent log: %w", path, err)
		}
		if err := ls.Close(); err != nil {
			return nil, fmt.Errorf("open ledger %s: apply its intent log: %w", path, err)
		}
	}
	s, err := openLocked(path, o)
	if err != nil {
		return nil, err
	}
	if err := s.endLeases(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// openLocked opens the database at path to write, holding its lock.
func openLocked(path string, o Options) (*Store, error) {
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	s, err := open(path, o)
	if err != nil {
		lock.release()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// endLeases ends the leases of every request in progress: they belong to
// a process that is gone (the caller holds the lock).
func (s *Store) endLeases() error {
	err := s.write(context.Background(), true, func(tx wtx) error {
		_, err := tx.Exec(`UPDATE requests SET lease_until = 0 WHERE finished_at = 0 AND state = 'in_progress'`)
		return err
	})
	if err != nil {
		return fmt.Errorf("end the leases of a previous process: %w", err)
	}
	return nil
}

// readers is how many connections read a writable store at once.
const readers = 8

func open(path string, o Options) (*Store, error) {
	dsn, err := dsn(path, o)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
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
	// Every reader stays open: database/sql keeps two idle by default,
	// so under load it closed the others as they were put back and
	// opened them again at the next read — a new connection's pragmas,
	// its statements prepared again, its page cache empty.
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	cp, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = w.Close()
		_ = r.Close()
		return nil, fmt.Errorf("open ledger checkpointer %s: %w", path, err)
	}
	cp.SetMaxOpenConns(1)
	s := &Store{w: w, r: r, cp: cp, ops: make(chan *op, 4096), stop: make(chan struct{}), stopped: make(chan struct{}),
		stmts: map[string]*sql.Stmt{}, committed: make(chan struct{}, 1), cpStopped: make(chan struct{}),
		behind: o.behind, fullByDefault: o.behind && !o.SyncNormal}
	if err := s.pin(writes); err != nil {
		_ = w.Close()
		_ = r.Close()
		_ = cp.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	go s.loop()
	go s.checkpoints()
	return s, nil
}

// pin takes the writer's one connection for good and prepares qs on it
// (with the transaction's own statements).
func (s *Store) pin(qs []string) error {
	wc, err := s.w.Conn(context.Background())
	if err != nil {
		return err
	}
	for _, q := range append([]string{qBegin, qCommit, qRollback}, qs...) {
		if _, ok := s.stmts[q]; ok {
			continue
		}
		st, err := wc.PrepareContext(context.Background(), q)
		if err != nil {
			_ = wc.Close()
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.stmts[q] = st
	}
	s.wc = wc
	return nil
}

// OpenReadOnly opens an existing database to read while a gateway may be
// writing it (`oncegate receipts`): it takes no lock and never writes;
// every write returns ledger.ErrReadOnly.
func OpenReadOnly(path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	dsn, err := dsn(path, Options{})
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	return &Store{r: r, path: path}, nil
}

// Ping commits a heartbeat (read-only: asks a reader).
func (s *Store) Ping(ctx context.Context) error {
	if s.w == nil {
		return s.r.PingContext(ctx)
	}
	beat := ns(time.Now())
	return s.write(ctx, true, func(tx wtx) error {
		_, err := tx.Exec(`INSERT INTO meta (k, v) VALUES ('heartbeat', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v`, beat)
		return err
	})
}

// Close commits what is queued and closes the database.
func (s *Store) Close() error {
	if s.w == nil { // read-only
		return s.r.Close()
	}
	s.once.Do(func() { close(s.stop) })
	<-s.stopped
	<-s.cpStopped
	s.conn.Lock() // a caller committing its own write finishes it
	defer s.conn.Unlock()
	for _, st := range s.stmts {
		_ = st.Close()
	}
	err := errors.Join(s.wc.Close(), s.w.Close(), s.r.Close(), s.cp.Close())
	if s.lock != nil {
		s.lock.release()
		s.lock = nil
	}
	return err
}

// ns and fromNS store times as the ledger package says.
var ns, fromNS = ledger.UnixNano, ledger.FromUnixNano

// Info is what `oncegate check --connect` reports of a database file.
type Info struct {
	Exists        bool
	Bytes         int64
	SchemaVersion int
	// HeldBy is the pid of the process that has the file open to write,
	// if one has ("" if none, or it is not known).
	HeldBy string
}

// Probe looks at a database file without changing it.
func Probe(path string) (*Info, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Info{}, nil
	}
	if err != nil {
		return nil, err
	}
	info := &Info{Exists: true, Bytes: st.Size()}
	if l, err := lockFile(path + ".lock"); errors.Is(err, ErrLocked) {
		holder, _ := os.ReadFile(path + ".lock")
		info.HeldBy = strings.TrimSpace(string(holder))
	} else if err == nil {
		l.release()
	}
	s, err := OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	err = s.r.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&info.SchemaVersion)
	return info, err
}
