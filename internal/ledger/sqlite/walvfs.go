package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

// walVFSName is the VFS the store opens its database with: SQLite's own
// default VFS, except that writes to the WAL file are gathered in memory
// and handed down in one write when SQLite next syncs, reads, sizes,
// truncates or closes that file.
//
// SQLite writes a commit's frames to the WAL two writes each — a 24-byte
// header, then the page — so a commit of 40 pages costs 80 write system
// calls, on the one goroutine every commit waits for. Gathered, it costs
// one. What reaches the operating system and the disk, and when, is
// unchanged: a commit's frames are handed down as soon as its last frame
// (the one whose header carries the database size: the commit frame) is
// written — before SQLite syncs at synchronous=FULL, before it publishes
// the commit in the WAL index at either setting — so no other connection
// can read a frame that is not in the file, and a crash of the process
// after a commit counts finds it in the file. This connection's own reads
// of the WAL write what is gathered first. A failed write fails the
// commit, or the sync or read that needed it, as it would have.
const walVFSName = "oncegate-wal"

// walBufMax bounds what one WAL file gathers before writing it down.
const walBufMax = 1 << 20

// walWriteMax is the most one write hands down: the unix VFS writes at most
// 128 KiB - 1 bytes per system call (it masks the length with 0x1ffff) and
// fails a write of exactly 128 KiB as a full disk, so it gets 96 KiB at a
// time.
const walWriteMax = 96 << 10

var walVFS struct {
	once sync.Once
	err  error
	base uintptr // the default VFS it wraps
}

// Where the wrapped VFS's file sits inside a WAL file's sqlite3_file: after
// the pointer to walMethods.
const walInner = 8

var (
	walMethods lib.Tsqlite3_io_methods
	walFilesMu sync.Mutex
	walFiles   = map[uintptr]*walFile{} // by the sqlite3_file SQLite passes
)

// walFile is an open WAL file: the wrapped VFS's file and the writes not
// yet handed to it, which start at offset off and are contiguous.
type walFile struct {
	name    string // the file's path
	inner   uintptr
	methods *lib.Tsqlite3_io_methods
	buf     []byte
	off     int64
	// commitPage: the last write was a commit frame's header, so the next
	// (its page) ends a commit.
	commitPage bool
}

// The WAL file's layout: a 32-byte header, then frames, each a 24-byte
// header — the page number, then, in a commit frame only, the database's
// size in pages — and the page.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
)

// walWritesIn and walWritesOut count the WAL writes SQLite made and those
// handed down (tests compare them).
var walWritesIn, walWritesOut atomic.Int64

func init() {
	walMethods.FiVersion = 1 // no shared memory or memory mapping: the WAL file uses neither
	*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&walMethods.FxClose)) = walClose
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&walMethods.FxRead)) = walRead
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&walMethods.FxWrite)) = walWrite
	*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&walMethods.FxTruncate)) = walTruncate
	*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&walMethods.FxSync)) = walSync
	*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&walMethods.FxFileSize)) = walFileSize
	*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&walMethods.FxLock)) = walLock
	*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&walMethods.FxUnlock)) = walUnlock
	*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&walMethods.FxCheckReservedLock)) = walCheckReservedLock
	*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&walMethods.FxFileControl)) = walFileControl
	*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&walMethods.FxSectorSize)) = walSectorSize
	*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&walMethods.FxDeviceCharacteristics)) = walDeviceCharacteristics
}

// registerWALVFS registers walVFSName once per process.
func registerWALVFS() error {
	walVFS.once.Do(func() {
		tls := libc.NewTLS() // kept: the VFS lives as long as the process
		base := lib.Xsqlite3_vfs_find(tls, 0)
		if base == 0 {
			walVFS.err = errors.New("sqlite has no default VFS")
			return
		}
		name, err := libc.CString(walVFSName)
		if err != nil {
			walVFS.err = err
			return
		}
		p := libc.Xmalloc(tls, uint64(unsafe.Sizeof(lib.Tsqlite3_vfs{})))
		if p == 0 {
			walVFS.err = errors.New("out of memory")
			return
		}
		v := at[lib.Tsqlite3_vfs](p)
		*v = *at[lib.Tsqlite3_vfs](base)
		v.FpNext, v.FzName = 0, name
		v.FszOsFile += walInner
		*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&v.FxOpen)) = walOpen
		walVFS.base = base
		if rc := lib.Xsqlite3_vfs_register(tls, p, 0); rc != lib.SQLITE_OK {
			walVFS.err = fmt.Errorf("register VFS %s: code %d", walVFSName, rc)
		}
	})
	return walVFS.err
}

// at views C memory at address p as a T.
func at[T any](p uintptr) *T { return *(**T)(unsafe.Pointer(&p)) }

// bytesAt views n bytes of C memory at address p.
func bytesAt(p uintptr, n int32) []byte { return unsafe.Slice(*(**byte)(unsafe.Pointer(&p)), n) }

func call[F any](fn uintptr) F { return *(*F)(unsafe.Pointer(&struct{ uintptr }{fn})) }

func walOpen(tls *libc.TLS, _ uintptr, zName uintptr, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	base := at[lib.Tsqlite3_vfs](walVFS.base)
	open := call[func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32](base.FxOpen)
	if flags&lib.SQLITE_OPEN_WAL == 0 {
		return open(tls, walVFS.base, zName, pFile, flags, pOutFlags) // the file is the base VFS's own
	}
	inner := pFile + walInner
	if rc := open(tls, walVFS.base, zName, inner, flags, pOutFlags); rc != lib.SQLITE_OK {
		at[lib.Tsqlite3_file](pFile).FpMethods = 0 // nothing to close
		return rc
	}
	f := &walFile{name: libc.GoString(zName), inner: inner, methods: at[lib.Tsqlite3_io_methods](at[lib.Tsqlite3_file](inner).FpMethods)}
	walFilesMu.Lock()
	walFiles[pFile] = f
	walFilesMu.Unlock()
	at[lib.Tsqlite3_file](pFile).FpMethods = uintptr(unsafe.Pointer(&walMethods))
	return lib.SQLITE_OK
}

func walFileOf(pFile uintptr) *walFile {
	walFilesMu.Lock()
	defer walFilesMu.Unlock()
	return walFiles[pFile]
}

// writeDown hands n bytes at p to the wrapped file at off.
func (f *walFile) writeDown(tls *libc.TLS, p uintptr, n int32, off int64) int32 {
	walWritesOut.Add(1)
	return call[func(*libc.TLS, uintptr, uintptr, int32, int64) int32](f.methods.FxWrite)(tls, f.inner, p, n, off)
}

// flush hands what is gathered to the wrapped file, walWriteMax at a
// time; on failure it is dropped, and the error fails the sync or read
// that asked.
func (f *walFile) flush(tls *libc.TLS) int32 {
	rc := int32(lib.SQLITE_OK)
	for b, off := f.buf, f.off; len(b) > 0 && rc == lib.SQLITE_OK; {
		n := min(len(b), walWriteMax)
		rc = f.writeDown(tls, uintptr(unsafe.Pointer(&b[0])), int32(n), off)
		b, off = b[n:], off+int64(n)
	}
	f.buf = f.buf[:0]
	return rc
}

// flushed is the WAL file pFile with nothing gathered, and the outcome of
// writing it down.
func flushed(tls *libc.TLS, pFile uintptr) (*walFile, int32) {
	f := walFileOf(pFile)
	return f, f.flush(tls)
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, n int32, off int64) int32 {
	f := walFileOf(pFile)
	walWritesIn.Add(1)
	if rc := f.gather(tls, zBuf, n, off); rc != lib.SQLITE_OK {
		return rc
	}
	if f.commitPage {
		f.commitPage = false
		return f.flush(tls)
	}
	if n == walFrameHeaderSize && off >= walHeaderSize && binary.BigEndian.Uint32(bytesAt(zBuf, n)[4:8]) != 0 {
		f.commitPage = true
	}
	return lib.SQLITE_OK
}

// gather adds a write to what is gathered, or hands it down.
func (f *walFile) gather(tls *libc.TLS, zBuf uintptr, n int32, off int64) int32 {
	if len(f.buf) > 0 && off == f.off+int64(len(f.buf)) && len(f.buf)+int(n) <= walBufMax {
		f.buf = append(f.buf, bytesAt(zBuf, n)...)
		return lib.SQLITE_OK
	}
	if rc := f.flush(tls); rc != lib.SQLITE_OK {
		return rc
	}
	if int(n) > walWriteMax {
		return f.writeDown(tls, zBuf, n, off)
	}
	if f.buf == nil {
		f.buf = make([]byte, 0, 256<<10)
	}
	f.off = off
	f.buf = append(f.buf, bytesAt(zBuf, n)...)
	return lib.SQLITE_OK
}

func walClose(tls *libc.TLS, pFile uintptr) int32 {
	f, rc := flushed(tls, pFile)
	crc := call[func(*libc.TLS, uintptr) int32](f.methods.FxClose)(tls, f.inner)
	walFilesMu.Lock()
	delete(walFiles, pFile)
	walFilesMu.Unlock()
	if rc != lib.SQLITE_OK {
		return rc
	}
	return crc
}

func walRead(tls *libc.TLS, pFile, zBuf uintptr, n int32, off int64) int32 {
	f, rc := flushed(tls, pFile)
	if rc != lib.SQLITE_OK {
		return rc
	}
	return call[func(*libc.TLS, uintptr, uintptr, int32, int64) int32](f.methods.FxRead)(tls, f.inner, zBuf, n, off)
}

func walTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	f, rc := flushed(tls, pFile)
	if rc != lib.SQLITE_OK {
		return rc
	}
	return call[func(*libc.TLS, uintptr, int64) int32](f.methods.FxTruncate)(tls, f.inner, size)
}

func walSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	f, rc := flushed(tls, pFile)
	if rc != lib.SQLITE_OK {
		return rc
	}
	rc = call[func(*libc.TLS, uintptr, int32) int32](f.methods.FxSync)(tls, f.inner, flags)
	if h := walSynced.Load(); h != nil && rc == lib.SQLITE_OK {
		(*h)(f.name)
	}
	return rc
}

// walSynced, if set, is called with a WAL file's path each time it is
// synced, before SQLite goes on (tests keep what a power loss would).
var walSynced atomic.Pointer[func(name string)]

func walFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	f, rc := flushed(tls, pFile)
	if rc != lib.SQLITE_OK {
		return rc
	}
	return call[func(*libc.TLS, uintptr, uintptr) int32](f.methods.FxFileSize)(tls, f.inner, pSize)
}

func walFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	f, rc := flushed(tls, pFile)
	if rc != lib.SQLITE_OK {
		return rc
	}
	return call[func(*libc.TLS, uintptr, int32, uintptr) int32](f.methods.FxFileControl)(tls, f.inner, op, pArg)
}

func walLock(tls *libc.TLS, pFile uintptr, lock int32) int32 {
	f := walFileOf(pFile)
	return call[func(*libc.TLS, uintptr, int32) int32](f.methods.FxLock)(tls, f.inner, lock)
}

func walUnlock(tls *libc.TLS, pFile uintptr, lock int32) int32 {
	f := walFileOf(pFile)
	return call[func(*libc.TLS, uintptr, int32) int32](f.methods.FxUnlock)(tls, f.inner, lock)
}

func walCheckReservedLock(tls *libc.TLS, pFile, pResOut uintptr) int32 {
	f := walFileOf(pFile)
	return call[func(*libc.TLS, uintptr, uintptr) int32](f.methods.FxCheckReservedLock)(tls, f.inner, pResOut)
}

func walSectorSize(tls *libc.TLS, pFile uintptr) int32 {
	f := walFileOf(pFile)
	return call[func(*libc.TLS, uintptr) int32](f.methods.FxSectorSize)(tls, f.inner)
}

func walDeviceCharacteristics(tls *libc.TLS, pFile uintptr) int32 {
	f := walFileOf(pFile)
	return call[func(*libc.TLS, uintptr) int32](f.methods.FxDeviceCharacteristics)(tls, f.inner)
}
