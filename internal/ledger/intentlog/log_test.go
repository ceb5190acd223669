package intentlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// A frame whose bytes changed ends the log there, whichever byte it is:
// the length, the checksum or the record.
func TestACorruptFrameEndsTheLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "intent.log")
	l, _, _ := open(t, path, Options{Preallocate: -1})
	appendAll(t, l, "first", "second", "third")
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
		b[i] ^= 0x40
		p := filepath.Join(dir, fmt.Sprintf("flip%d.log", i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		l, got, rc := open(t, p, Options{Preallocate: -1})
		if len(got) != 1 || got[0] != "first" || rc.Cause == nil || rc.Size != int64(second) {
			t.Fatalf("byte %d flipped: %q, %+v; want the first record, then a cause", i, got, rc)
		}
		// The frames after the corrupt one are gone for good: an append
		// follows the first, and the third never comes back.
		appendAll(t, l, "x")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, got, rc := open(t, p, Options{}); fmt.Sprint(got) != "[first x]" || rc.Cause != nil {
			t.Fatalf("byte %d flipped, appended, reopened: %q, cause %v", i, got, rc.Cause)
		}
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
