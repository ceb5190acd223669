// Package intentlog is an append-only log of records, each framed with its
// length and a CRC-32C of its contents, whose appends are group-committed:
// the records of every caller appending at the same time reach the file in
// one write and, with Options.Sync, one fdatasync, and each caller returns
// once its records are there. It is the core of the ledger write path
// measured in docs/performance.md ("The ledger's write path: options
// measured"): the durable record of a request's intent and outcome, with a
// queryable store written behind it.
//
// After a crash the log's tail may hold a frame cut short by the crash (a
// torn write) or bytes that never became a frame. Open reads the log from
// its start and cuts such a tail off, so that later appends follow the
// last good frame. Damaged bytes with an intact frame after them cannot
// be a crash's: they are corruption, which Open and Scan report with the
// file and the byte offset and never cut (scan.go).
package intentlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// A frame is a header of two little-endian uint32s — the record's length,
// then the CRC-32C (Castagnoli) of the length's four bytes and the record —
// followed by the record. Covering the length too means a corrupt length
// is caught as such, not read as a short or long record that happens to
// check. A record is never empty: the zeros a file system may leave at the
// end of a file after a crash do not read as frames.
const headerSize = 8

// MaxRecord is the largest record a frame holds (16 MiB).
const MaxRecord = 16 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors reading a frame.
var (
	// ErrTorn: b ends before the frame does (the write that made it was
	// cut short, or it was never written).
	ErrTorn = errors.New("intentlog: torn frame")
	// ErrCorrupt: the frame's length is out of bounds or its checksum does
	// not match.
	ErrCorrupt = errors.New("intentlog: corrupt frame")
	// ErrEmptyRecord: Append was given an empty record.
	ErrEmptyRecord = errors.New("intentlog: empty record")
	// ErrTooLarge: Append was given a record over MaxRecord bytes.
	ErrTooLarge = errors.New("intentlog: record too large")
)

// AppendFrame appends rec's frame to dst. rec is 1 to MaxRecord bytes
// long (the caller checks).
func AppendFrame(dst, rec []byte) []byte {
	var h [headerSize]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(rec)))
	sum := crc32.Update(crc32.Checksum(h[0:4], castagnoli), castagnoli, rec)
	binary.LittleEndian.PutUint32(h[4:8], sum)
	return append(append(dst, h[:]...), rec...)
}

// ReadFrame reads the frame at the start of b: its record (aliasing b)
// and the frame's length. It returns ErrTorn if b ends inside the frame
// and ErrCorrupt if the frame cannot be one AppendFrame wrote.
func ReadFrame(b []byte) (rec []byte, n int, err error) {
	if len(b) < headerSize {
		return nil, 0, ErrTorn
	}
	size := binary.LittleEndian.Uint32(b[0:4])
	if size == 0 || size > MaxRecord {
		return nil, 0, ErrCorrupt
	}
	n = headerSize + int(size)
	if len(b) < n {
		return nil, 0, ErrTorn
	}
	want := binary.LittleEndian.Uint32(b[4:8])
	if crc32.Update(crc32.Checksum(b[0:4], castagnoli), castagnoli, b[headerSize:n]) != want {
		return nil, 0, ErrCorrupt
	}
	return b[headerSize:n:n], n, nil
}
