package intentlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// open opens the log at path, returning its records as strings.
func open(t *testing.T, path string, o Options) (*Log, []string, Recovered) {
	t.Helper()
	var recs []string
	l, rc, err := Open(path, o, func(rec []byte) error {
		recs = append(recs, string(rec))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, recs, rc
}

func appendAll(t *testing.T, l *Log, recs ...string) {
	t.Helper()
	for _, r := range recs {
		if err := l.Append([]byte(r)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecordsAppendedAtOnceAreAllReadBackEachCallersInOrder(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", synced), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "intent.log")
			l, _, _ := open(t, path, Options{Sync: synced})
			const writers, each = 8, 40
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						// Two records in one call stay together, in order.
						if err := l.Append(fmt.Appendf(nil, "%d:%d:a", w, i), fmt.Appendf(nil, "%d:%d:b", w, i)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, recs, rc := open(t, path, Options{Sync: synced})
			if rc.Records != 2*writers*each || len(recs) != rc.Records || rc.Cause != nil {
				t.Fatalf("read back %d records (%d counted), cause %v; want %d", len(recs), rc.Records, rc.Cause, 2*writers*each)
			}
			// One call's records are in one group commit, side by side; each
			// writer's calls in the order it made them.
			next := make([]int, writers)
			for k := 0; k+1 < len(recs); k += 2 {
				var w, i int
				if _, err := fmt.Sscanf(recs[k], "%d:%d:a", &w, &i); err != nil || w < 0 || w >= writers {
					t.Fatalf("record %d is %q: %v", k, recs[k], err)
				}
				if i != next[w] || recs[k+1] != fmt.Sprintf("%d:%d:b", w, i) {
					t.Fatalf("records %d and %d are %q, %q; writer %d's next call is %d", k, k+1, recs[k], recs[k+1], w, next[w])
				}
				next[w]++
			}
			for w, n := range next {
				if n != each {
					t.Errorf("writer %d: %d calls read back, want %d", w, n, each)
				}
			}
		})
	}
}

// Cut at every byte, a log reads back the frames wholly before the cut —
// a frame cut short is a torn tail, never a record — and the next append
// lands right after them.
func TestATornTailIsCutAfterTheLastWholeFrame(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "intent.log")
	l, _, _ := open(t, path, Options{Preallocate: -1})
	recs := []string{"claim of r1", "finish of r1 with a longer body", "claim of r2"}
	appendAll(t, l, recs...)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ends := []int{len(magic)}
	for _, r := range recs {
		ends = append(ends, ends[len(ends)-1]+headerSize+len(r))
	}
	if ends[len(ends)-1] != len(whole) {
		t.Fatalf("file is %d bytes, frames end at %d", len(whole), ends[len(ends)-1])
	}
	for cut := len(magic); cut <= len(whole); cut++ {
		kept := 0
		for kept < len(recs) && ends[kept+1] <= cut {
			kept++
		}
		p := filepath.Join(dir, fmt.Sprintf("cut%d.log", cut))
		if err := os.WriteFile(p, whole[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		// Not extended ahead: no zeros written over what follows.
		l, got, rc := open(t, p, Options{Preallocate: -1})
		wantCause := error(nil)
		if cut != ends[kept] {
			wantCause = ErrTorn
		}
		if len(got) != kept || rc.Cause != wantCause || rc.Dropped != int64(cut-ends[kept]) || rc.Size != int64(ends[kept]) {
			t.Fatalf("cut at %d: %d records, %+v; want %d, cause %v", cut, len(got), rc, kept, wantCause)
		}
		// Shorter than what was cut: nothing of the torn frame may be
		// left after it.
		appendAll(t, l, "x")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		_, got, rc = open(t, p, Options{})
		want := append(append([]string{}, recs[:kept]...), "x")
		if fmt.Sprint(got) != fmt.Sprint(want) || rc.Cause != nil {
			t.Fatalf("cut at %d, appended, reopened: %q (cause %v); want %q", cut, got, rc.Cause, want)
		}
	}
}

// A frame whose bytes changed with an intact frame after it is
// corruption, whichever byte it is — the length, the checksum or the
// record: no crash leaves an intact frame after a torn one. Open refuses
// the file naming it and the offset, and changes nothing; Scan reads the
// records on both sides of the damage.
func TestAFlippedByteWithAFrameAfterItIsCorruption(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "intent.log")
	l, _, _ := open(t, path, Options{Preallocate: 1 << 12})
	appendAll(t, l, "first", "second", "third")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	second := len(magic) + headerSize + len("first")
	third := second + headerSize + len("second")
	for i := second; i < third; i++ {
		b := bytes.Clone(whole)
		b[i] ^= 0x40
		p := filepath.Join(dir, fmt.Sprintf("flip%d.log", i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(p, Options{}, func([]byte) error { return nil })
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorruptLog) || ce.Path != p || ce.Offset != int64(second) || ce.Kind != Damaged ||
			ce.Length != int64(third-second) || !strings.Contains(err.Error(), fmt.Sprintf("%s is corrupt at byte %d", p, second)) {
			t.Fatalf("byte %d flipped: open says %v; want the corruption at byte %d, %d bytes", i, err, second, third-second)
		}
		if after, err := os.ReadFile(p); err != nil || !bytes.Equal(after, b) {
			t.Fatalf("byte %d flipped: the refused file changed (%v)", i, err)
		}
		var got []string
		sc, err := Scan(p, ScanOptions{}, func(rec []byte, off int64) error {
			got = append(got, fmt.Sprintf("%s@%d", rec, off))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("[first@%d third@%d]", len(magic), third); fmt.Sprint(got) != want || len(sc.Problems) != 1 || sc.Tail != nil {
			t.Fatalf("byte %d flipped: scanned %v, %+v; want %s and one problem", i, got, sc, want)
		}
	}
}

// A byte changed in the last frame, with nothing intact after it, is a
// torn tail as a frame cut short is: cut off.
func TestAFlippedByteInTheLastFrameIsATornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "intent.log")
	l, _, _ := open(t, path, Options{Preallocate: 1 << 12})
	appendAll(t, l, "first", "second")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	second := len(magic) + headerSize + len("first")
	for i := second; i < second+headerSize+len("second"); i++ {
		b := bytes.Clone(whole)
		b[i] ^= 0x01
		p := filepath.Join(dir, fmt.Sprintf("flip%d.log", i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l, got, rc := open(t, p, Options{Preallocate: 1 << 12})
		if fmt.Sprint(got) != "[first]" || rc.Size != int64(second) || rc.Cause == nil {
			t.Fatalf("byte %d of the last frame flipped: %q, %+v", i, got, rc)
		}
		appendAll(t, l, "x")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, got, rc := open(t, p, Options{}); fmt.Sprint(got) != "[first x]" || rc.Cause != nil {
			t.Fatalf("byte %d flipped, cut, appended, reopened: %q, cause %v", i, got, rc.Cause)
		}
	}
}

// Zeros where a frame should be are the end of the log if nothing intact
// follows them — the zeros ahead of the frames, with a torn frame in them
// or not — and corruption if an intact frame does.
func TestZerosWithAFrameAfterThemAreCorruption(t *testing.T) {
	dir := t.TempDir()
	frames := AppendFrame(AppendFrame(nil, []byte("one")), []byte("two"))
	end := len(magic) + len(frames)
	torn := AppendFrame(nil, []byte("a torn record"))[:12]
	for _, c := range []struct {
		name    string
		after   []byte // what follows the two frames
		corrupt bool
		cause   error
	}{
		{"zeros", make([]byte, 4096), false, nil},
		{"a torn frame, then zeros", append(bytes.Clone(torn), make([]byte, 4096)...), false, ErrCorrupt},
		{"zeros, then bytes that are no frame", append(make([]byte, 4096), 7, 7, 7), false, ErrCorrupt},
		{"zeros, then a frame", append(make([]byte, 4096), AppendFrame(nil, []byte("three"))...), true, nil},
		{"a torn frame, then a frame", append(bytes.Clone(torn), AppendFrame(nil, []byte("three"))...), true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(p, append(append(bytes.Clone(magic), frames...), c.after...), 0o600); err != nil {
				t.Fatal(err)
			}
			l, rc, err := Open(p, Options{}, func([]byte) error { return nil })
			var ce *CorruptError
			if c.corrupt {
				if !errors.As(err, &ce) || ce.Offset != int64(end) || ce.Length != int64(len(c.after)-len(AppendFrame(nil, []byte("three")))) {
					t.Fatalf("open: %v; want corruption at byte %d", err, end)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if rc.Records != 2 || rc.Size != int64(end) || !errors.Is(rc.Cause, c.cause) && rc.Cause != c.cause {
				t.Fatalf("open: %+v; want 2 records, the file cut at %d, cause %v", rc, end, c.cause)
			}
		})
	}
}

// numbered reads the number a test record starts with ("12:…").
func numbered(rec []byte) (int64, error) {
	var n int64
	if _, err := fmt.Sscanf(string(rec), "%d:", &n); err != nil {
		return 0, err
	}
	return n, nil
}

// With a number in each record, Scan finds a record numbered past the
// next one (a gap: records missing) and one numbered at or before the one
// before it (out of order), each at its frame's offset; a record past
// damaged bytes tells how many records they held.
func TestScanFindsGapsAndRecordsOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, recs ...string) (string, []int64) {
		t.Helper()
		b, offs := bytes.Clone(magic), []int64{}
		for _, r := range recs {
			offs = append(offs, int64(len(b)))
			b = AppendFrame(b, []byte(r))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, offs
	}
	for _, c := range []struct {
		name  string
		recs  []string
		prev  int64
		kind  Kind
		at    int // the record the problem is at (-1: none)
		p, n  int64
		seen  int // records handed to fn
		first int64
		last  int64
	}{
		{"in sequence", []string{"1:a", "2:b", "3:c"}, 0, 0, -1, 0, 0, 3, 1, 3},
		{"in sequence after the file before", []string{"8:a", "9:b"}, 7, 0, -1, 0, 0, 2, 8, 9},
		{"a gap", []string{"1:a", "2:b", "5:e", "6:f"}, 0, Gap, 2, 2, 5, 4, 1, 6},
		{"a gap after the file before", []string{"9:a"}, 7, Gap, 0, 7, 9, 1, 9, 9},
		{"out of order", []string{"1:a", "2:b", "3:c", "1:x", "4:d"}, 0, OutOfOrder, 3, 3, 1, 4, 1, 4},
		{"a number seen twice", []string{"1:a", "2:b", "2:b", "3:c"}, 0, OutOfOrder, 2, 2, 2, 3, 1, 3},
		{"out of order with the file before", []string{"5:a"}, 7, OutOfOrder, 0, 7, 5, 0, 0, 0},
		{"unnumbered", []string{"1:a", "b", "2:c"}, 0, Unnumbered, 1, 1, 0, 2, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, offs := write(strings.ReplaceAll(c.name, " ", "_"), c.recs...)
			seen := 0
			sc, err := Scan(p, ScanOptions{Seq: numbered, Prev: c.prev}, func([]byte, int64) error { seen++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if seen != c.seen || sc.Records != c.seen || sc.First != c.first || sc.Last != c.last {
				t.Fatalf("%d records handed over (%d counted), numbers %d to %d; want %d, %d to %d", seen, sc.Records, sc.First, sc.Last, c.seen, c.first, c.last)
			}
			if c.at < 0 {
				if sc.Err() != nil {
					t.Fatalf("a log in sequence: %v", sc.Err())
				}
				return
			}
			var ce *CorruptError
			if !errors.As(sc.Err(), &ce) || ce.Kind != c.kind || ce.Offset != offs[c.at] || ce.Path != p || ce.Kind != Unnumbered && (ce.Prev != c.p || ce.Next != c.n) {
				t.Fatalf("problems %v; want %v at byte %d (record %d), %d then %d", sc.Problems, c.kind, offs[c.at], c.at, c.p, c.n)
			}
			// Open checks no numbers: only damaged bytes are its business.
			l, _, err := Open(p, Options{}, func([]byte) error { return nil })
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			_ = l.Close()
		})
	}
	// Damaged bytes: the record after them says how many records they
	// held, and is no gap of its own.
	p, offs := write("damaged", "1:a", "2:b", "3:c", "4:d")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[offs[1]+headerSize] ^= 1
	b[offs[2]+2] ^= 1 // the second damaged frame's length
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := Scan(p, ScanOptions{Seq: numbered}, func([]byte, int64) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Problems) != 1 || sc.Problems[0].Kind != Damaged || sc.Problems[0].Offset != offs[1] || sc.Problems[0].Length != offs[3]-offs[1] ||
		sc.Problems[0].Prev != 1 || sc.Problems[0].Next != 4 || !strings.Contains(sc.Problems[0].Error(), "records 2 to 3 are in them") {
		t.Fatalf("problems %v; want one: bytes %d to %d damaged, records 2 to 3 in them", sc.Problems, offs[1], offs[3])
	}
}

// A number stamped into each record under the log's lock follows the
// records' order in the file, however many goroutines append at once.
func TestAppendStampedNumbersFollowTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "intent.log")
	l, _, _ := open(t, path, Options{})
	var next int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				rec := []byte("00000000:x")
				if err := l.AppendStamped(func() { next++; copy(rec, fmt.Sprintf("%08d", next)) }, rec); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sc, err := Scan(path, ScanOptions{Seq: numbered}, func([]byte, int64) error { return nil })
	if err != nil || sc.Err() != nil || sc.Records != 400 || sc.Last != 400 {
		t.Fatalf("scan: %v, %+v", err, sc)
	}
}

// The zeros a log is extended with ahead of its frames are not records,
// nor a sign of a crash.
func TestZerosAheadOfTheFramesEndTheLogQuietly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "intent.log")
	l, _, _ := open(t, path, Options{Preallocate: 1 << 16})
	appendAll(t, l, "one", "two")
	size := l.Size()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= size {
		t.Fatalf("file is %d bytes, frames %d: not extended ahead", st.Size(), size)
	}
	_, got, rc := open(t, path, Options{})
	if fmt.Sprint(got) != "[one two]" || rc.Cause != nil || rc.Size != size {
		t.Fatalf("read back %q, %+v", got, rc)
	}
}

func TestAFileThatIsNotALogIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, []byte("SQLite format 3\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(path, Options{}, func([]byte) error { return nil }); err == nil {
		t.Fatal("opened a file that is not a log")
	}
}

// A file cut short while its first bytes were written is begun again.
func TestALogCutShortAtItsCreationStartsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "intent.log")
	if err := os.WriteFile(path, magic[:3], 0o600); err != nil {
		t.Fatal(err)
	}
	l, got, rc := open(t, path, Options{})
	if len(got) != 0 || rc.Dropped != 3 {
		t.Fatalf("a log of 3 bytes read back %q, %+v", got, rc)
	}
	appendAll(t, l, "one")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, got, _ = open(t, path, Options{})
	if fmt.Sprint(got) != "[one]" {
		t.Fatalf("read back %q", got)
	}
}

func TestAppendRefusesWhatCannotBeAFrame(t *testing.T) {
	l, _, _ := open(t, filepath.Join(t.TempDir(), "intent.log"), Options{})
	defer l.Close()
	if err := l.Append([]byte("ok"), nil); !errors.Is(err, ErrEmptyRecord) {
		t.Errorf("empty record: %v", err)
	}
	if err := l.Append(make([]byte, MaxRecord+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("record over MaxRecord: %v", err)
	}
	if l.Size() != int64(len(magic)) {
		t.Errorf("a refused call wrote: size %d", l.Size())
	}
}

// Once a write fails, no later append is acknowledged: what the file holds
// after the last good flush is not known.
func TestAFailedWriteFailsEveryLaterAppend(t *testing.T) {
	l, _, _ := open(t, filepath.Join(t.TempDir(), "intent.log"), Options{})
	appendAll(t, l, "one")
	if err := l.f.Close(); err != nil { // the next write fails
		t.Fatal(err)
	}
	if err := l.Append([]byte("two")); err == nil {
		t.Fatal("an append whose write failed succeeded")
	}
	if err := l.Append([]byte("three")); err == nil {
		t.Fatal("an append after a failed write succeeded")
	}
}

func TestAppendAfterCloseFails(t *testing.T) {
	l, _, _ := open(t, filepath.Join(t.TempDir(), "intent.log"), Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// An error from the function reading the records back stops Open.
func TestOpenStopsAtTheReadersError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "intent.log")
	l, _, _ := open(t, path, Options{})
	appendAll(t, l, "one")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("cannot apply")
	if _, _, err := Open(path, Options{}, func([]byte) error { return bad }); !errors.Is(err, bad) {
		t.Fatalf("open: %v", err)
	}
}

// One Log at a time has the file: a second writer would interleave its
// frames with the first's.
func TestASecondOpenOfALogInUseIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "intent.log")
	l, _, _ := open(t, path, Options{})
	if _, _, err := Open(path, Options{}, func([]byte) error { return nil }); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, _, _ = open(t, path, Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Records appended while a group commit is written go into the next one
// together: Stats counts every record once and no more flushes than
// appends.
func TestStatsCountRecordsAndFlushes(t *testing.T) {
	l, _, _ := open(t, filepath.Join(t.TempDir(), "intent.log"), Options{})
	defer l.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := l.Append([]byte("a"), []byte("b")); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	if st.Records != 160 || st.Flushes < 1 || st.Flushes > 80 {
		t.Fatalf("stats %+v: want 160 records in 1 to 80 flushes", st)
	}
}
