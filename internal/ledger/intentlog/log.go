package intentlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// magic starts every log file: the format's name and version.
var magic = []byte("oncelog\x01")

// Errors opening and appending.
var (
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("intentlog: closed")
	// ErrLocked: another open Log (in this process or another) has the
	// file.
	ErrLocked = errors.New("intentlog: the log is in use by another writer")
)

// Options choose how appends reach the disk.
type Options struct {
	// Sync makes every group commit end with an fdatasync: an Append
	// returns once its records are on the disk, and survives a power loss.
	// Without it an Append returns once its records are written to the
	// operating system: they survive any crash of the process, not
	// necessarily one of the machine (docs/durability.md).
	Sync bool
	// Preallocate is how far ahead of its frames the file is extended
	// with zeros, in bytes (0: 16 MiB; negative: never). A sync that
	// overwrites blocks the file already has flushes only them, while one
	// that grows the file commits the file system's journal too: on the
	// project's machine about a millisecond against one and a half.
	Preallocate int64
}

// defaultPreallocate is Options.Preallocate's default.
const defaultPreallocate = 16 << 20

// Recovered is what Open found in an existing log.
type Recovered struct {
	// Records is how many records were read back.
	Records int
	// Size is the length of the log file kept, in bytes.
	Size int64
	// Dropped is how many bytes after the last intact frame were cut off:
	// the zeros the file was extended with ahead of its frames, and the
	// remains of a write a crash cut short.
	Dropped int64
	// Cause says why reading stopped before the end of the file: ErrTorn
	// or ErrCorrupt; nil if it stopped at the end or at the zeros ahead of
	// the frames.
	Cause error
}

// Log is an open log. It is safe for concurrent use.
type Log struct {
	f    *os.File
	sync bool

	mu sync.Mutex
	// size is how much of the file holds frames written; alloc is the
	// file's length (zeros after size), grown prealloc at a time.
	size, alloc, prealloc int64
	// buf holds the frames of the open batch, which the next flush takes;
	// spare is the buffer the previous flush wrote, reused.
	buf, spare []byte
	open       *batch
	// inflight is the batch being written (nil when none is: then
	// flushing is false).
	inflight *batch
	flushing bool
	// flushes and records count group commits written and the records
	// they held (Stats).
	flushes, records int64
	// err breaks the log for good: a write or a sync failed, and what the
	// file holds after the last good flush is not known.
	err    error
	closed bool
}

// batch is one group commit: the records appended while the previous one
// was being written.
type batch struct {
	done chan struct{} // closed once written (and synced), or failed
	err  error         // set before done is closed
	// records counts the records in the batch.
	records int64
	// lead asks one of the batch's waiters to write it: the flush before
	// it ended and no one else has started this one.
	lead chan struct{}
}

func newBatch() *batch {
	return &batch{done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

// Open opens the log at path, creating it if it does not exist, and reads
// it back. One Log at a time has the file: Open fails with ErrLocked
// while another holds it (on Unix; the lock goes with the process). It
// calls fn with every record of every intact frame, in the order they were
// appended (the slice is only valid during the call; an error from fn
// stops Open with that error). A torn tail — bytes after the last intact
// frame that are no frame, with no intact frame after them — is cut off,
// so the next append follows the last intact frame. Bytes that are no
// frame with an intact frame after them are corruption: Open fails with a
// *CorruptError (errors.Is ErrCorruptLog) naming the file and the offset,
// and leaves the file as it is (fn has been called with the intact
// records by then). Scan reads a log without opening it.
func Open(path string, o Options, fn func(rec []byte) error) (*Log, Recovered, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, Recovered{}, fmt.Errorf("open intent log %s: %w", path, err)
	}
	err = lock(f)
	var rc Recovered
	if err == nil {
		rc, err = readBack(f, path, fn)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path)) // the file's name is durable too
	}
	if err != nil {
		_ = f.Close()
		return nil, Recovered{}, fmt.Errorf("open intent log %s: %w", path, err)
	}
	prealloc := o.Preallocate
	if prealloc == 0 {
		prealloc = defaultPreallocate
	}
	return &Log{f: f, sync: o.Sync, size: rc.Size, alloc: rc.Size, prealloc: max(prealloc, 0), open: newBatch()}, rc, nil
}

// readBack reads f's frames into fn and cuts f after the last intact one
// — unless bytes that are no intact frame have one after them: that is
// corruption, and readBack returns it with f unchanged. A file shorter
// than the magic that starts as it does was cut short while it was being
// created: it is begun again.
func readBack(f *os.File, path string, fn func([]byte) error) (Recovered, error) {
	b, err := readAll(f)
	if err != nil {
		return Recovered{}, err
	}
	sc, err := scanBytes(b, path, ScanOptions{}, func(rec []byte, _ int64) error { return fn(rec) })
	if err != nil {
		return Recovered{}, err
	}
	if err := sc.Err(); err != nil {
		return Recovered{}, err
	}
	if len(b) < len(magic) {
		if err := writeAll(f, magic, 0, true); err != nil {
			return Recovered{}, err
		}
		return Recovered{Size: int64(len(magic)), Dropped: int64(len(b))}, nil
	}
	rc := Recovered{Records: sc.Records, Size: sc.End, Dropped: sc.Size - sc.End, Cause: sc.Tail}
	if rc.Dropped > 0 {
		if err := f.Truncate(rc.Size); err != nil {
			return Recovered{}, fmt.Errorf("cut the log after its last intact frame: %w", err)
		}
		if err := f.Sync(); err != nil {
			return Recovered{}, err
		}
	}
	return rc, nil
}

// errZeros: a frame header of zeros — the zeros the file was extended
// with ahead of its frames, where no frame has been written yet.
var errZeros = errors.New("intentlog: zeros")

// Append adds recs to the log, in order, and returns once they are
// written (and, with Options.Sync, on the disk). Records appended while
// another group commit is being written go into the next one together.
// An error means the records may or may not be in the log; after a failed
// write or sync every later Append fails too.
func (l *Log) Append(recs ...[]byte) error { return l.AppendStamped(nil, recs...) }

// AppendStamped is Append with stamp called first, under the log's lock,
// once recs are known to be appended: what stamp writes into them (a
// sequence number) then follows the order of the records in the file —
// a record stamped after another is written after it. stamp must not
// change the records' lengths; it is not called if the log is closed or
// failed, or a record is refused (nil: no stamp).
func (l *Log) AppendStamped(stamp func(), recs ...[]byte) error {
	for _, r := range recs {
		switch {
		case len(r) == 0:
			return ErrEmptyRecord
		case len(r) > MaxRecord:
			return ErrTooLarge
		}
	}
	l.mu.Lock()
	if l.err != nil || l.closed {
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return err
	}
	if stamp != nil {
		stamp()
	}
	for _, r := range recs {
		l.buf = AppendFrame(l.buf, r)
	}
	l.open.records += int64(len(recs))
	b := l.open
	for {
		if !l.flushing && l.open == b {
			l.flush()
		}
		// Either b was just written, or another caller is writing b or the
		// batch before it: wait for b, or to be asked to write it.
		l.mu.Unlock()
		select {
		case <-b.done:
			return b.err
		case <-b.lead:
		}
		l.mu.Lock()
	}
}

// flush writes the open batch (l.mu held; released while writing). If
// records arrived meanwhile, one of their callers is asked to write them
// next: no goroutine of its own waits for work, and a caller alone writes
// its records itself.
func (l *Log) flush() {
	cur, buf, off := l.open, l.buf, l.size
	l.open, l.buf, l.inflight, l.flushing = newBatch(), l.spare[:0], cur, true
	grow := int64(0)
	if end := off + int64(len(buf)); end > l.alloc && l.prealloc > 0 {
		grow = end + l.prealloc - l.alloc
	}
	l.mu.Unlock()
	err := l.extend(grow)
	if err == nil {
		err = writeAll(l.f, buf, off, l.sync)
	}
	l.mu.Lock()
	l.alloc += grow
	l.flushing, l.inflight = false, nil
	if err == nil {
		l.size += int64(len(buf))
		l.flushes++
		l.records += cur.records
	} else {
		l.err = fmt.Errorf("intent log write: %w", err)
	}
	if cap(buf) <= 4<<20 {
		l.spare = buf[:0]
	}
	cur.err = l.err
	close(cur.done)
	if l.err != nil && len(l.buf) > 0 {
		// Nothing more is written: the next batch fails as this one did.
		next := l.open
		l.open, l.buf = newBatch(), l.buf[:0]
		next.err = l.err
		close(next.done)
		return
	}
	if len(l.buf) > 0 {
		select {
		case l.open.lead <- struct{}{}:
		default:
		}
	}
}

// extend adds n zeros to the end of the file (l.alloc is only changed by
// the flush that calls it: no lock needed to read it). They are synced by
// the sync of the flush that follows.
func (l *Log) extend(n int64) error {
	if n <= 0 {
		return nil
	}
	zeros := make([]byte, min(n, 1<<20))
	for off := l.alloc; off < l.alloc+n; off += int64(len(zeros)) {
		if _, err := l.f.WriteAt(zeros[:min(int64(len(zeros)), l.alloc+n-off)], off); err != nil {
			return fmt.Errorf("preallocate: %w", err)
		}
	}
	return nil
}

// writeAll writes b at off in one call and, if sync, flushes it to the
// disk.
func writeAll(f *os.File, b []byte, off int64, sync bool) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	if sync {
		return datasync(f)
	}
	return nil
}

// Stats are what a log has written since it was opened.
type Stats struct {
	// Flushes counts the group commits written (each one write and, with
	// Options.Sync, one fdatasync); Records the records they held.
	Flushes, Records int64
}

// Stats returns what the log has written since it was opened.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Flushes: l.flushes, Records: l.records}
}

// Size is how many bytes of the file hold frames written so far.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Close writes the records still being appended and closes the file;
// Appends after it fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	for {
		if l.flushing {
			b := l.inflight
			l.mu.Unlock()
			<-b.done
			l.mu.Lock()
			continue
		}
		if len(l.buf) > 0 && l.err == nil {
			l.flush()
			continue
		}
		break
	}
	err := l.err
	l.mu.Unlock()
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close intent log: %w", cerr)
	}
	return err
}

// syncDir makes the entries of dir durable (a file just created in it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
