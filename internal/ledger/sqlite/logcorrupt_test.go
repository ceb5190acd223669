package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// frameAt is where a record starts in a log file written by writeLog.
type frameAt struct {
	file string
	off  int64
}

// writeLog writes the intent log of n requests beside the database at
// path — for each a claim, an append (its dispatch) and a finish, LSNs 1
// to 3n — in files of perFile records (.log.1, .log.2 …), each extended
// with zeros ahead of its frames as a running store's are: what a crash
// leaves when the database has applied none of it. It returns where each
// record (by LSN - 1) starts.
func writeLog(t *testing.T, path string, n, perFile int) []frameAt {
	t.Helper()
	var at []frameAt
	var l *intentlog.Log
	lsn := int64(0)
	add := func(rec []byte) {
		if lsn%int64(perFile) == 0 {
			if l != nil {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if l, _, err = intentlog.Open(fmt.Sprintf("%s.log.%d", path, lsn/int64(perFile)+1), intentlog.Options{Preallocate: 1 << 12},
				func([]byte) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		lsn++
		setLSN(rec, lsn)
		at = append(at, frameAt{fmt.Sprintf("%s.log.%d", path, (lsn-1)/int64(perFile)+1), l.Size()})
		if err := l.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		add(encodeClaim(logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}))
		add(encodeAppend([]ledger.Event{logEv(id, 2, 1, ledger.EvDispatch)}))
		f := logFinish(id, 1, 3)
		f.Receipt = []byte(`{"request_id":"` + id + `","operation":"chat.completions","request_sha256":"sha-` + id + `","created_at":"2026-12-02T12:00:00Z"}`)
		resp, err := ledger.EncodeResponse(f.Response)
		if err != nil {
			t.Fatal(err)
		}
		add(encodeFinish(f, resp))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return at
}

// logFiles reads the log's files beside path (and any moved aside), by
// name.
func logFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(path + ".log.*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = b
	}
	return out
}

func flip(t *testing.T, file string, off int64) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLogCorruptionRefusesToOpenAndKeepsEveryFile: records only in the
// log (the database applied none), and the log damaged otherwise than a
// crash can — a byte flipped mid-log, a file missing or repeated, a torn
// tail with a file after it, a log that starts past the database. The
// store refuses to open, naming the file and the byte offset; every file
// of the log is as it was, the database has none of it, and CheckLog
// says the same. A torn tail in the last file is still cut.
func TestLogCorruptionRefusesToOpenAndKeepsEveryFile(t *testing.T) {
	for _, c := range []struct {
		name    string
		perFile int
		damage  func(t *testing.T, path string, at []frameAt)
		kind    intentlog.Kind
		at      int   // the record (LSN - 1) at whose frame the corruption is
		missing int64 // records lost
	}{
		{"a byte flipped mid-log", 30, func(t *testing.T, _ string, at []frameAt) { flip(t, at[14].file, at[14].off+20) }, intentlog.Damaged, 14, 1},
		{"the first record damaged", 30, func(t *testing.T, _ string, at []frameAt) { flip(t, at[0].file, at[0].off+20) }, intentlog.Damaged, 0, 1},
		{"a frame's length flipped", 30, func(t *testing.T, _ string, at []frameAt) { flip(t, at[14].file, at[14].off+1) }, intentlog.Damaged, 14, 1},
		{"a file missing", 10, func(t *testing.T, path string, _ []frameAt) { remove(t, path+".log.2") }, intentlog.Gap, 20, 10},
		{"a file's records again", 10, func(t *testing.T, path string, _ []frameAt) { copyFile(t, path+".log.1", path+".log.2") },
			intentlog.OutOfOrder, 0, 10},
		{"a torn tail with a file after it", 10, func(t *testing.T, path string, at []frameAt) {
			if err := os.Truncate(path+".log.1", at[9].off+5); err != nil {
				t.Fatal(err)
			}
		}, intentlog.Damaged, 9, 1},
		{"the log starts past the database", 10, func(t *testing.T, path string, _ []frameAt) { remove(t, path+".log.1") }, intentlog.Gap, 10, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			at := writeLog(t, path, 10, c.perFile)
			c.damage(t, path, at)
			want := at[c.at]
			if c.name == "a file's records again" {
				want = frameAt{path + ".log.2", at[0].off}
			}
			before := logFiles(t, path)
			for _, open := range []func() error{
				func() error { s, err := OpenLog(path, Options{}); closeIf(s, err); return err },
				func() error { s, err := OpenWith(path, Options{}); closeIf(s, err); return err },
			} {
				err := open()
				var ce *intentlog.CorruptError
				if !errors.As(err, &ce) || ce.Kind != c.kind || ce.Path != want.file || ce.Offset != want.off ||
					!strings.Contains(err.Error(), fmt.Sprintf("intent log %s is corrupt at byte %d", want.file, want.off)) {
					t.Fatalf("open: %v; want %v at %s byte %d", err, c.kind, want.file, want.off)
				}
				if after := logFiles(t, path); !sameFiles(before, after) {
					t.Fatalf("the refused open changed the log's files: %v, then %v", keys(before), keys(after))
				}
			}
			rep, err := CheckLog(path)
			if err != nil {
				t.Fatal(err)
			}
			var ce *intentlog.CorruptError
			if !errors.As(rep.Err(), &ce) || ce.Path != want.file || ce.Offset != want.off || rep.MissingRecords != c.missing || rep.Applied != 0 {
				t.Fatalf("check: %v, %d records missing (%v); want %s byte %d, %d missing", rep.Err(), rep.MissingRecords, rep.Missing, want.file, want.off, c.missing)
			}
			ro, err := OpenReadOnly(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			if _, err := ro.Get(context.Background(), "k:r0"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("the refused open applied records: %v", err)
			}
		})
	}
	t.Run("a torn tail in the last file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		at := writeLog(t, path, 10, 10)
		if err := os.Truncate(path+".log.3", at[29].off+5); err != nil {
			t.Fatal(err)
		}
		rep, err := CheckLog(path)
		if err != nil || rep.Err() != nil || rep.TornFile != path+".log.3" || rep.TornOffset != at[29].off || rep.TornBytes != 5 || rep.Records != 29 {
			t.Fatalf("check: %v %+v", err, rep)
		}
		s := openLogStore(t, path, false)
		if r, err := s.Get(context.Background(), "k:r8"); err != nil || r.State != ledger.Succeeded {
			t.Fatalf("r8: %+v %v", r, err)
		}
		if r, err := s.Get(context.Background(), "k:r9"); err != nil || r.State != ledger.InProgress {
			t.Fatalf("r9, whose finish was torn: %+v %v", r, err)
		}
	})
}

func remove(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

func closeIf(s interface{ Close() error }, err error) {
	if err == nil {
		_ = s.Close()
	}
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestLogSalvageMarksWhatWasLostIndeterminate: one record of a log only
// the log holds is damaged. The salvage applies every intact record,
// marks indeterminate the request whose terminal was in the damaged bytes
// (in progress when the log broke) or whose claim was (its terminal,
// read after them, names its identity, and its receipt the body's
// digest), moves the damaged file aside and removes none of it; the store
// then opens with every other request finished, and the lost ones'
// records as a retry of their key needs them to answer outcome_unknown.
func TestLogSalvageMarksWhatWasLostIndeterminate(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		record    int    // the damaged record, LSN - 1
		lost      string // the request marked
		claimLost bool
	}{
		{"a terminal lost", 3*3 + 2, "r3", false},
		{"a claim lost", 5 * 3, "r5", true},
		{"events lost", 7*3 + 1, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			at := writeLog(t, path, 10, 30)
			flip(t, at[c.record].file, at[c.record].off+12)
			damaged, err := os.ReadFile(path + ".log.1")
			if err != nil {
				t.Fatal(err)
			}
			rep, err := SalvageLog(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var marked []string
			for _, m := range rep.Marked {
				marked = append(marked, m.RequestID)
				if m.ClaimLost != c.claimLost || m.Identity != "k:"+m.RequestID || m.Tenant != "acme" {
					t.Errorf("marked %+v", m)
				}
			}
			want := []string{c.lost}
			if c.lost == "" {
				want = nil
			}
			moved := rep.Moved[path+".log.1"]
			if fmt.Sprint(marked) != fmt.Sprint(want) || rep.MissingRecords != 1 || rep.Applied != 29 || len(rep.Unkeyed) != 0 ||
				!strings.HasPrefix(moved, path+".log.1.damaged-") {
				t.Fatalf("salvage: marked %v, %d missing, %d applied, unkeyed %v, moved %q; want %v", marked, rep.MissingRecords, rep.Applied, rep.Unkeyed, moved, want)
			}
			if b, err := os.ReadFile(moved); err != nil || !bytes.Equal(b, damaged) {
				t.Fatalf("the damaged file moved aside: %v, same bytes %v", err, bytes.Equal(b, damaged))
			}
			if files, _, _ := segments(path); len(files) != 0 {
				t.Fatalf("log files left: %v", files)
			}
			s := openLogStore(t, path, false)
			for i := range 10 {
				id := fmt.Sprintf("r%d", i)
				r, err := s.Get(ctx, "k:"+id)
				switch {
				case err != nil:
					t.Fatalf("%s: %v", id, err)
				case id == c.lost && (r.State != ledger.Indeterminate || r.Response != nil || r.RequestSHA256 != "sha-"+id || r.FinishedAt.IsZero()):
					t.Fatalf("%s, lost: %+v", id, r)
				case id != c.lost && r.State != ledger.Succeeded:
					t.Fatalf("%s: %+v", id, r)
				}
			}
			if c.claimLost {
				if aside := refusedRows(t, s); !strings.Contains(aside[fmt.Sprintf("intentlog_refused_why:%020d", c.record+3)], "claim of request "+c.lost) {
					t.Fatalf("the lost claim's terminal is not kept: %q", aside)
				}
			}
		})
	}
}

// TestLogSalvageOfALostFile: a whole file of the log is gone — records
// 11 to 20: the finish of r3 (claimed in the file before), everything of
// r4 and r5, and the claim of r6 (finished in the file after). The
// salvage marks r3 (in progress) and r6 (its finish names its identity)
// indeterminate; r4 and r5 cannot be named, and the database has no
// record of them.
func TestLogSalvageOfALostFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	writeLog(t, path, 10, 10)
	remove(t, path+".log.2")
	rep, err := SalvageLog(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var marked []string
	for _, m := range rep.Marked {
		marked = append(marked, fmt.Sprintf("%s/%v", m.RequestID, m.ClaimLost))
	}
	if fmt.Sprint(marked) != "[r3/false r6/true]" || rep.MissingRecords != 10 || len(rep.Moved) != 1 || rep.Moved[path+".log.3"] == "" {
		t.Fatalf("salvage: marked %v, %d missing, moved %v", marked, rep.MissingRecords, rep.Moved)
	}
	s := openLogStore(t, path, false)
	for i := range 10 {
		id := fmt.Sprintf("r%d", i)
		r, err := s.Get(ctx, "k:"+id)
		switch id {
		case "r3", "r6":
			if err != nil || r.State != ledger.Indeterminate {
				t.Fatalf("%s: %+v %v", id, r, err)
			}
		case "r4", "r5":
			if !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("%s, all of whose records were lost: %+v %v", id, r, err)
			}
		default:
			if err != nil || r.State != ledger.Succeeded {
				t.Fatalf("%s: %+v %v", id, r, err)
			}
		}
	}
}

// A salvage of an intact log changes nothing: the store's open applies
// it.
func TestLogSalvageOfAnIntactLogDoesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	writeLog(t, path, 4, 5)
	before := logFiles(t, path)
	rep, err := SalvageLog(path, Options{})
	if !errors.Is(err, ErrLogIntact) || rep.Records != 12 || len(rep.Moved) != 0 {
		t.Fatalf("salvage: %v %+v", err, rep)
	}
	if after := logFiles(t, path); !sameFiles(before, after) {
		t.Fatal("the log changed")
	}
}

// A salvage cut short after it applied the intact records — the
// database's position is past the lost ones now — marks, when run again,
// the requests its plan named.
func TestLogSalvageCutShortMarksTheSameRequests(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	at := writeLog(t, path, 10, 30)
	flip(t, at[3*4+2].file, at[3*4+2].off+12) // r4's terminal
	db, err := openLocked(path, Options{behind: true})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := scanLog(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.salvagePlan(ctx, ls); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.replayLog(ctx, ls.recs, 0); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := SalvageLog(path, Options{})
	if err != nil || len(rep.Marked) != 1 || rep.Marked[0].RequestID != "r4" || rep.MissingRecords != 0 {
		t.Fatalf("salvage again: %v, marked %+v, %d missing", err, rep.Marked, rep.MissingRecords)
	}
	s := openLogStore(t, path, false)
	if r, err := s.Get(ctx, "k:r4"); err != nil || r.State != ledger.Indeterminate {
		t.Fatalf("r4: %+v %v", r, err)
	}
}

// TestLogLSNsFollowTheFileUnderConcurrentAppends: with many requests
// appending at once, the log a crash leaves is one run of LSNs in file
// order — what lets a gap or a record out of order be told from a torn
// tail. (An LSN taken before the log's lock would let two appends reach
// the file in the other order.)
func TestLogLSNsFollowTheFileUnderConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openLogStore(t, path, true)
	const writers, each = 16, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, _, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil {
					t.Error(err)
					return
				}
				if err := s.Finish(ctx, logFinish(id, 1, 2)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The crash image: the log as it is, beside a database that applied
	// none of it.
	crash := filepath.Join(t.TempDir(), "ledger.db")
	copyFile(t, path+".log.1", crash+".log.1")
	rep, err := CheckLog(crash)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Err() != nil || rep.Records != 2*writers*each || rep.First != 1 || rep.Last != 2*writers*each {
		t.Fatalf("the log of concurrent appends: %v, %d records (LSN %d to %d)", rep.Err(), rep.Records, rep.First, rep.Last)
	}
}
