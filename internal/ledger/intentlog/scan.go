package intentlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// What a crash may leave, and what it may not. A write the crash cut
// short leaves at most the log's last frames incomplete — nothing intact
// can follow them, since nothing was written after that write — and the
// zeros a file is extended with ahead of its frames are not frames at
// all. So bytes that are no intact frame are a torn tail only if no intact
// frame follows them: the file is cut there. With an intact frame after
// them they are corruption (a flipped bit, a lost or misdirected block),
// and so is a record numbered out of sequence (ScanOptions.Seq): the
// records in between, or those of the damaged bytes, were acknowledged
// and are lost. Open and Scan report it (CorruptError) and change
// nothing: what the file holds is the evidence.

// ErrCorruptLog: a log holds bytes that are no intact frame with an
// intact frame after them, or records out of sequence (*CorruptError
// says where).
var ErrCorruptLog = errors.New("intentlog: the log is corrupt")

// Kind says what a CorruptError found.
type Kind int

// The kinds of corruption.
const (
	// Damaged: bytes that are no intact frame, with an intact frame
	// after them.
	Damaged Kind = iota + 1
	// Gap: a record numbered further on than the one after the record
	// before it.
	Gap
	// OutOfOrder: a record numbered at or before the record before it.
	OutOfOrder
	// Unnumbered: an intact frame whose record ScanOptions.Seq cannot
	// number.
	Unnumbered
)

func (k Kind) String() string {
	switch k {
	case Damaged:
		return "damaged"
	case Gap:
		return "gap"
	case OutOfOrder:
		return "out of order"
	case Unnumbered:
		return "unnumbered"
	}
	return fmt.Sprintf("kind %d", int(k))
}

// CorruptError is corruption found in a log file: where it starts, and
// what it is. errors.Is(err, ErrCorruptLog) holds for it.
type CorruptError struct {
	// Path is the file.
	Path string
	// Offset is the byte offset in the file where the corruption starts:
	// the first damaged byte, or the frame of the record out of sequence.
	Offset int64
	Kind   Kind
	// Length is how many bytes are damaged, up to the next intact frame
	// (Damaged; 0 otherwise).
	Length int64
	// Cause is why the first damaged bytes are no frame (Damaged:
	// ErrTorn, ErrCorrupt, or nil for a frame header of zeros); what Seq
	// answered (Unnumbered).
	Cause error
	// Prev is the number of the last record before the corruption and
	// Next that of the record after the damaged bytes, or of the record
	// out of sequence (with ScanOptions.Seq; 0 when there is none or it
	// is not known).
	Prev, Next int64
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("intent log %s is corrupt at byte %d: ", e.Path, e.Offset)
	switch e.Kind {
	case Damaged:
		why := "a frame header of zeros"
		switch {
		case errors.Is(e.Cause, ErrTorn):
			why = "a frame cut short"
		case errors.Is(e.Cause, ErrCorrupt):
			why = "a frame that fails its checksum"
		}
		msg += fmt.Sprintf("%d bytes are no intact frame (%s), and an intact frame follows at byte %d", e.Length, why, e.Offset+e.Length)
		if e.Next != 0 && e.Prev != 0 && e.Next > e.Prev+1 {
			msg += ": " + records(e.Prev+1, e.Next-1) + " in them"
		}
	case Gap:
		msg += fmt.Sprintf("record %d follows record %d: %s missing", e.Next, e.Prev, records(e.Prev+1, e.Next-1))
	case OutOfOrder:
		msg += fmt.Sprintf("record %d follows record %d: out of order", e.Next, e.Prev)
	case Unnumbered:
		msg += fmt.Sprintf("an intact frame whose record has no number (%v)", e.Cause)
	default:
		msg += e.Kind.String()
	}
	return msg
}

// records names the records from to to, with the verb's number.
func records(from, to int64) string {
	if from == to {
		return fmt.Sprintf("record %d is", from)
	}
	return fmt.Sprintf("records %d to %d are", from, to)
}

// Unwrap makes errors.Is(err, ErrCorruptLog) hold.
func (e *CorruptError) Unwrap() error { return ErrCorruptLog }

// ScanOptions say how Scan checks a log's records.
type ScanOptions struct {
	// Seq reads a record's number (nil: records carry none). With it, each
	// record must be numbered one more than the record before it: one
	// numbered further on is a gap, one numbered at or before it out of
	// order. Such a record is corruption, and is not handed to Scan's fn
	// if it is out of order or Seq fails on it.
	Seq func(rec []byte) (int64, error)
	// Prev is the number of the record before the file's first (0: not
	// known; the first record may carry any number).
	Prev int64
}

// Scanned is what Scan found in a log file.
type Scanned struct {
	// Records counts the records handed to fn.
	Records int
	// First and Last are the numbers of the first and the highest record
	// handed to fn (ScanOptions.Seq; 0: none).
	First, Last int64
	// End is where the file's last intact frame ends: an append to the
	// file would go there. Size is the file's length.
	End, Size int64
	// Tail says what the bytes after End are: nil if there are none or
	// they are zeros (the file extended ahead of its frames); ErrTorn or
	// ErrCorrupt if they are a torn tail: a frame cut short, or one that
	// fails its checksum, with no intact frame after it in this file.
	Tail error
	// Problems is the corruption found, in file order.
	Problems []*CorruptError
}

// Err is the first corruption found, or nil.
func (s *Scanned) Err() error {
	if len(s.Problems) == 0 {
		return nil
	}
	return s.Problems[0]
}

// Scan reads the log file at path as it is: it changes nothing and takes
// no lock (the caller makes sure that no one appends to it meanwhile).
// fn gets the record of every intact frame in file order, with the
// frame's offset — those after damaged bytes too (the slice is only valid
// during the call; an error from fn stops Scan with that error). What
// Scan finds wrong is in the result: corruption in Problems (the file is
// not a log, or cannot be read, is an error).
func Scan(path string, o ScanOptions, fn func(rec []byte, off int64) error) (*Scanned, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scan intent log %s: %w", path, err)
	}
	sc, err := scanBytes(b, path, o, fn)
	if err != nil {
		return nil, fmt.Errorf("scan intent log %s: %w", path, err)
	}
	return sc, nil
}

// errNotALog: the file does not start as a log does.
var errNotALog = errors.New("not an intent log")

// scanBytes is Scan over a file's bytes.
func scanBytes(b []byte, path string, o ScanOptions, fn func(rec []byte, off int64) error) (*Scanned, error) {
	sc := &Scanned{Size: int64(len(b))}
	if len(b) < len(magic) {
		// Cut short while it was being created: no frames yet.
		if !bytes.Equal(b, magic[:len(b)]) {
			return nil, errNotALog
		}
		if len(b) > 0 {
			sc.Tail = ErrTorn
		}
		return sc, nil
	}
	if !bytes.Equal(b[:len(magic)], magic) {
		return nil, errNotALog
	}
	s := &scanner{sc: sc, path: path, o: o, prev: o.Prev, fn: fn}
	z := zerosFrom(b)
	off := len(magic)
	sc.End = int64(off)
	for off < len(b) {
		rec, n, err := frameAt(b, off)
		if err == nil {
			if err := s.record(rec, int64(off)); err != nil {
				return nil, err
			}
			off += n
			sc.End = int64(off)
			continue
		}
		next := nextFrame(b, off, z)
		if next < 0 {
			if off < z {
				sc.Tail = err
				if errors.Is(err, errZeros) {
					sc.Tail = ErrCorrupt
				}
			}
			break
		}
		if errors.Is(err, errZeros) {
			err = nil
		}
		s.damaged = &CorruptError{Path: path, Offset: int64(off), Kind: Damaged, Length: int64(next - off), Cause: err, Prev: s.prev}
		sc.Problems = append(sc.Problems, s.damaged)
		off = next
	}
	return sc, nil
}

// scanner checks the numbers of a file's records as scanBytes reads them.
type scanner struct {
	sc   *Scanned
	path string
	o    ScanOptions
	prev int64 // the highest number read so far (o.Prev before the first)
	fn   func([]byte, int64) error
	// damaged is the damage just read past: the next record's number
	// tells what it held.
	damaged *CorruptError
}

// record checks rec's number and hands it to fn.
func (s *scanner) record(rec []byte, off int64) error {
	if s.o.Seq != nil {
		n, err := s.o.Seq(rec)
		if err != nil {
			s.sc.Problems = append(s.sc.Problems, &CorruptError{Path: s.path, Offset: off, Kind: Unnumbered, Cause: err, Prev: s.prev})
			return nil
		}
		damaged := s.damaged
		s.damaged = nil
		if damaged != nil {
			damaged.Next = n
		}
		switch {
		case s.prev != 0 && n <= s.prev:
			s.sc.Problems = append(s.sc.Problems, &CorruptError{Path: s.path, Offset: off, Kind: OutOfOrder, Prev: s.prev, Next: n})
			return nil
		case s.prev != 0 && n > s.prev+1 && damaged == nil:
			// (After damaged bytes, the records in them are the gap.)
			s.sc.Problems = append(s.sc.Problems, &CorruptError{Path: s.path, Offset: off, Kind: Gap, Prev: s.prev, Next: n})
		}
		if s.sc.First == 0 {
			s.sc.First = n
		}
		s.prev, s.sc.Last = n, n
	}
	s.sc.Records++
	return s.fn(rec, off)
}

// frameAt reads the frame at off: errZeros if its header is zeros.
func frameAt(b []byte, off int) ([]byte, int, error) {
	if len(b)-off >= headerSize && allZero(b[off:off+headerSize]) {
		return nil, 0, errZeros
	}
	return ReadFrame(b[off:])
}

// nextFrame is the offset of the first intact frame after off, where
// bytes that are no frame start (-1: none). The frame at off may have only
// its record damaged: its length then says where the next one starts, and
// that is tried first; then every byte after off up to the file's
// trailing zeros (from z on), where no frame can start (crczeros.go
// makes each try cost about the same, however far its length reaches).
func nextFrame(b []byte, off, z int) int {
	f := newFinder(b, off, z)
	if len(b)-off >= headerSize {
		if size := binary.LittleEndian.Uint32(b[off:]); size > 0 && size <= MaxRecord {
			if next := off + headerSize + int(size); next < len(b) && f.intact(next) {
				return next
			}
		}
	}
	for p := off + 1; p < f.z; p++ {
		if f.intact(p) {
			return p
		}
	}
	return -1
}

// zeros is compared with, a block at a time.
var zeros [4096]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// readAll reads f from its start.
func readAll(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}
