package sqlite

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// Reading the intent log back (docs/durability.md, "A damaged intent
// log"). Its records are numbered in the order of its files — each LSN
// is stamped under the log's lock (appendRecord), and a segment starts
// only once every append to the one before has returned — so the log is
// one run of LSNs, one more each record, whose first is at most one past
// the database's position (a file goes only once the database has applied
// all of it). A crash can only cut the run short at its end: a torn last
// record, with nothing readable after it, which is cut. Anything else —
// damaged bytes with a record after them in the same file or a later one,
// an LSN missing from the run or out of order, a run that starts past the
// database's position — is corruption: acknowledged records are lost or
// in doubt, and the store refuses to open (scanLog reads the files as they
// are and changes none).

// logFile is one file of the intent log as scanLog read it.
type logFile struct {
	path string
	scan *intentlog.Scanned
	// first is the offset of its first record (-1: none).
	first int64
}

// logScan is what the intent log's files hold.
type logScan struct {
	files []logFile
	// recs are the records read, in file order: every intact frame with
	// an LSN in sequence (one out of order is left out).
	recs []*logRecord
	// problems is the corruption found, in log order.
	problems []*intentlog.CorruptError
	// applied is the database's position when the log was read.
	applied int64
	// next is the number of the segment to start after the last.
	next int
}

// recordLSN reads a record's LSN (intentlog.ScanOptions.Seq).
func recordLSN(rec []byte) (int64, error) {
	if len(rec) < recordHead {
		return 0, fmt.Errorf("%w: %d bytes, too short for an LSN", errBadRecord, len(rec))
	}
	lsn := int64(binary.LittleEndian.Uint64(rec[lsnOff:]))
	if lsn <= 0 {
		return 0, fmt.Errorf("%w: LSN %d", errBadRecord, lsn)
	}
	return lsn, nil
}

// scanLog reads every file of the intent log beside the database at path,
// whose position is applied, and checks the run of their LSNs.
func scanLog(path string, applied int64) (*logScan, error) {
	names, nums, err := segments(path)
	if err != nil {
		return nil, err
	}
	ls := &logScan{applied: applied, next: 1}
	var prev int64    // the last LSN read
	var torn *logFile // a file whose tail is torn, with no record after it yet
	for i, name := range names {
		lf := logFile{path: name, first: -1}
		sc, err := intentlog.Scan(name, intentlog.ScanOptions{Seq: recordLSN, Prev: prev}, func(b []byte, off int64) error {
			lr, err := readRecord(slices.Clone(b))
			if err != nil {
				return err // not for a record recordLSN read
			}
			if lf.first < 0 {
				lf.first = off
			}
			ls.recs = append(ls.recs, lr)
			return nil
		})
		if err != nil {
			return nil, err
		}
		lf.scan = sc
		problems := sc.Problems
		if torn != nil && sc.Records > 0 {
			// The torn tail of a file before is followed by records: it
			// is damage, and what it held is the gap before this file's
			// first record.
			t := torn.scan
			d := &intentlog.CorruptError{Path: torn.path, Offset: t.End, Kind: intentlog.Damaged, Length: t.Size - t.End, Cause: t.Tail, Prev: prev}
			if len(problems) > 0 && problems[0].Kind == intentlog.Gap && problems[0].Offset == lf.first {
				d.Next = problems[0].Next
				problems = problems[1:]
			} else {
				d.Next = sc.First
			}
			ls.problems = append(ls.problems, d)
			torn = nil
		}
		ls.problems = append(ls.problems, problems...)
		if sc.Last != 0 {
			prev = sc.Last
		}
		ls.files = append(ls.files, lf)
		if sc.Tail != nil {
			torn = &ls.files[len(ls.files)-1]
		}
		ls.next = nums[i] + 1
	}
	ls.checkStart()
	return ls, nil
}

// checkStart adds a gap between the database's position and the log's
// first record, unless damage before that record explains it.
func (ls *logScan) checkStart() {
	if len(ls.recs) == 0 || ls.recs[0].lsn <= ls.applied+1 {
		return
	}
	first := slices.IndexFunc(ls.files, func(f logFile) bool { return f.first >= 0 })
	at := ls.files[first]
	if len(ls.problems) > 0 {
		p := ls.problems[0]
		in := slices.IndexFunc(ls.files, func(f logFile) bool { return f.path == p.Path })
		if p.Kind == intentlog.Damaged && (in < first || in == first && p.Offset < at.first) {
			return // damaged bytes before the first record: what they held is the gap
		}
	}
	gap := &intentlog.CorruptError{Path: at.path, Offset: at.first, Kind: intentlog.Gap, Prev: ls.applied, Next: ls.recs[0].lsn}
	ls.problems = append([]*intentlog.CorruptError{gap}, ls.problems...)
}

// err is the first corruption found, or nil.
func (ls *logScan) err() error {
	if len(ls.problems) == 0 {
		return nil
	}
	return ls.problems[0]
}

// tail is the log's torn last record, if it has one: the file and where
// its torn bytes start, and how many there are.
func (ls *logScan) tail() (path string, off, n int64) {
	for i := len(ls.files) - 1; i >= 0; i-- {
		sc := ls.files[i].scan
		if sc.Tail != nil {
			return ls.files[i].path, sc.End, sc.Size - sc.End
		}
		if sc.Records > 0 {
			break
		}
	}
	return "", 0, 0
}

// lsnRange is a run of LSNs, from and to included.
type lsnRange struct{ from, to int64 }

// missing lists the LSNs past the database's position, up to the
// highest read, that no record read has: the records the damage lost.
func (ls *logScan) missing() (ranges []lsnRange, n int64) {
	lsns := make([]int64, 0, len(ls.recs))
	for _, lr := range ls.recs {
		if lr.lsn > ls.applied {
			lsns = append(lsns, lr.lsn)
		}
	}
	slices.Sort(lsns)
	next := ls.applied + 1
	for _, l := range lsns {
		if l > next {
			ranges = append(ranges, lsnRange{next, l - 1})
			n += l - next
		}
		next = max(next, l+1)
	}
	return ranges, n
}

// damagedBytes counts the bytes of the log that are no intact frame,
// besides a torn last record.
func (ls *logScan) damagedBytes() int64 {
	var n int64
	for _, p := range ls.problems {
		n += p.Length
	}
	return n
}
