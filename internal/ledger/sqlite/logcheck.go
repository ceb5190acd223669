package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// LSNRange is a run of log sequence numbers, From and To included.
type LSNRange struct{ From, To int64 }

// LogReport is what CheckLog found in the intent log beside a SQLite
// ledger (docs/durability.md, "A damaged intent log").
type LogReport struct {
	// Files are the log's files, oldest first.
	Files []string
	// Records counts the intact records read, in sequence; First and Last
	// are the lowest and highest of their LSNs.
	Records     int
	First, Last int64
	// Applied is the LSN the database has applied up to; Unapplied counts
	// the records read past it (the next open applies them).
	Applied   int64
	Unapplied int
	// TornFile, TornOffset and TornBytes locate the log's torn last
	// record, if it has one: bytes the next open cuts (TornFile "": none).
	TornFile              string
	TornOffset, TornBytes int64
	// Problems is the corruption found, in log order: the store refuses
	// to open while there is any.
	Problems []*intentlog.CorruptError
	// Missing are the LSNs past Applied, up to the highest read, that no
	// intact record has — the records the corruption lost — and
	// MissingRecords counts them.
	Missing        []LSNRange
	MissingRecords int64
	// DamagedBytes counts the log's bytes that are no intact frame, its
	// torn last record aside.
	DamagedBytes int64
}

// Err is the first corruption found (a *intentlog.CorruptError), or nil.
func (r *LogReport) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return r.Problems[0]
}

// report summarises ls.
func (ls *logScan) report() *LogReport {
	r := &LogReport{Records: len(ls.recs), Applied: ls.applied, Problems: ls.problems, DamagedBytes: ls.damagedBytes()}
	for _, f := range ls.files {
		r.Files = append(r.Files, f.path)
	}
	for _, lr := range ls.recs {
		if r.First == 0 || lr.lsn < r.First {
			r.First = lr.lsn
		}
		r.Last = max(r.Last, lr.lsn)
		if lr.lsn > ls.applied {
			r.Unapplied++
		}
	}
	r.TornFile, r.TornOffset, r.TornBytes = ls.tail()
	ranges, n := ls.missing()
	for _, m := range ranges {
		r.Missing = append(r.Missing, LSNRange{From: m.from, To: m.to})
	}
	r.MissingRecords = n
	return r
}

// CheckLog reads the intent log beside the database at path as the
// store's open would, and reports what it holds — and the corruption that
// would make the open refuse, with the files and the byte offsets. It
// changes nothing. It takes the database's lock, so that no gateway
// writes the log meanwhile: with a gateway running it fails with
// ErrLocked.
func CheckLog(path string) (*LogReport, error) {
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("check the intent log of %s: %w", path, err)
	}
	defer lock.release()
	applied, err := readApplied(path)
	if err != nil {
		return nil, fmt.Errorf("check the intent log of %s: %w", path, err)
	}
	ls, err := scanLog(path, applied)
	if err != nil {
		return nil, fmt.Errorf("check the intent log of %s: %w", path, err)
	}
	return ls.report(), nil
}

// readApplied reads the database's position without writing it (0 if
// there is no database yet).
func readApplied(path string) (int64, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		return 0, err
	}
	defer ro.Close()
	return ro.appliedLSN(context.Background())
}
