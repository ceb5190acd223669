package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
)

// TestLogPowerLossKeepsWhatWasAcknowledged: the database behind a log at
// full commits its records at synchronous=NORMAL, and a log segment goes
// only once a commit that syncs the WAL covers it. A power loss keeps of
// the WAL only what was last synced: the test keeps a copy of the WAL at
// each of its syncs, and after many requests — with segments applied and
// deleted, the last commits not synced — opens a copy of the database
// with that WAL and the log's files as they are. Every acknowledged
// request is there, finished.
func TestLogPowerLossKeepsWhatWasAcknowledged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	var mu sync.Mutex
	var wal []byte // the WAL as it was at its last sync
	hook := func(name string) {
		if name != path+"-wal" {
			return
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("copy the WAL at a sync: %v", err)
			return
		}
		mu.Lock()
		wal = b
		mu.Unlock()
	}
	walSynced.Store(&hook)
	t.Cleanup(func() { walSynced.Store(nil) })
	s := openLogStore(t, path, false)
	s.segLimit = 4096
	const n = 60
	for i := range n {
		id := fmt.Sprintf("p%d", i)
		if _, _, err := s.Claim(ctx, logRec(id), []ledger.Event{logEv(id, 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, logFinish(id, 1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.barrier(ctx); err != nil {
		t.Fatal(err)
	}
	files, nums, err := segments(path)
	if err != nil || len(nums) == 0 || nums[0] < 3 {
		t.Fatalf("segments %v %v: want some written and deleted", files, err)
	}
	// The power goes: the database file as it is (what a checkpoint wrote
	// to it and did not sync is in the synced WAL too), the WAL as last
	// synced, the log as it is (at full every acknowledged record in it
	// was synced).
	dir := t.TempDir()
	cp := filepath.Join(dir, "ledger.db")
	copyFile(t, path, cp)
	mu.Lock()
	if wal != nil {
		if err := os.WriteFile(cp+"-wal", wal, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mu.Unlock()
	for _, f := range files {
		copyFile(t, f, filepath.Join(dir, filepath.Base(f)))
	}
	r := openLogStore(t, cp, false)
	for i := range n {
		id := fmt.Sprintf("p%d", i)
		if rec, err := r.Get(ctx, "k:"+id); err != nil || rec.State != ledger.Succeeded {
			t.Fatalf("%s after the power loss: %+v %v", id, rec, err)
		}
	}
}

// TestLogDatabaseCommitsAtTheSyncAsked: behind a log at full, the
// database commits the log's records at synchronous=NORMAL and every
// other write at FULL; behind a log at normal, both at NORMAL, and a
// write that must be on the disk (syncFull) at FULL.
func TestLogDatabaseCommitsAtTheSyncAsked(t *testing.T) {
	ctx := context.Background()
	for _, normal := range []bool{false, true} {
		s := openLogStore(t, filepath.Join(t.TempDir(), "ledger.db"), normal)
		for _, c := range []struct {
			mode syncMode
			want int // 1 NORMAL, 2 FULL
		}{{syncLazy, 1}, {syncDefault, map[bool]int{false: 2, true: 1}[normal]}, {syncFull, 2}, {syncLazy, 1}} {
			got := 0
			err := s.db.writeSync(ctx, true, c.mode, func(tx wtx) error { return tx.QueryRow(`PRAGMA synchronous`).Scan(&got) })
			if err != nil || got != c.want {
				t.Fatalf("normal=%v mode %d: synchronous %d (%v), want %d", normal, c.mode, got, err, c.want)
			}
		}
	}
}

// refusedRows reads the records set aside in the meta table.
func refusedRows(t *testing.T, s *LogStore) map[string]string {
	t.Helper()
	rows, err := s.db.r.Query(`SELECT k, v FROM meta WHERE k LIKE 'intentlog_refused%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = string(v)
	}
	return out
}

// TestLogPoisonRecordIsSetAside: a record the index admits and the
// database refuses — a second request with a request id already taken,
// under another identity: the requests table's constraint refuses it —
// does not stop the store. It is set aside in the meta table and counted,
// the records around it are applied, later writes go on, and the next
// open does not meet it again.
func TestLogPoisonRecordIsSetAside(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := OpenLog(path, Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, logRec("x1"), []ledger.Event{logEv("x1", 1, 1, ledger.EvCreated)}); err != nil {
		t.Fatal(err)
	}
	dup := logRec("x1")
	dup.Identity = "k:other"
	if _, _, err := s.Claim(ctx, dup, nil); err != nil {
		t.Fatal(err) // admitted: the index checks identities, not request ids
	}
	if _, _, err := s.Claim(ctx, logRec("x2"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, logFinish("x1", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "k:x1"); err != nil || r.State != ledger.Succeeded {
		t.Fatalf("x1: %+v %v", r, err)
	}
	if _, err := s.Get(ctx, "k:other"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused claim: %v", err)
	}
	if r, err := s.Get(ctx, "k:x2"); err != nil || r.RequestID != "x2" {
		t.Fatalf("x2, after the refused claim: %+v %v", r, err)
	}
	if n := s.Refused(); n != 1 {
		t.Fatalf("refused %d, want 1", n)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("the store stopped: %v", err)
	}
	aside := refusedRows(t, s)
	if len(aside) != 2 || aside["intentlog_refused:00000000000000000002"] == "" ||
		!strings.Contains(aside["intentlog_refused_why:00000000000000000002"], "UNIQUE") {
		t.Fatalf("set aside: %q", aside)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLogStore(t, path, true)
	if r, err := s.Get(ctx, "k:x2"); err != nil || r.RequestID != "x2" {
		t.Fatalf("x2 after a reopen: %+v %v", r, err)
	}
}

// TestLogUndecodableRecordIsSetAsideAtOpen: a record in the log that
// cannot be decoded (intact frame, unknown kind) is set aside when the
// open replays the log; the records after it are applied.
func TestLogUndecodableRecordIsSetAsideAtOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, _, err := intentlog.Open(path+".log.1", intentlog.Options{}, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	bad := newRecord('Z', 4)
	setLSN(bad, 1)
	bad = append(bad, "junk"...)
	good := encodeClaim(logRec("y1"), []ledger.Event{logEv("y1", 1, 1, ledger.EvCreated)})
	setLSN(good, 2)
	if err := l.Append(bad, good); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenLog(path, Options{SyncNormal: true})
	if err != nil {
		t.Fatalf("open with an undecodable record in the log: %v", err)
	}
	defer s.Close()
	if n := s.Refused(); n != 1 {
		t.Fatalf("refused %d, want 1", n)
	}
	if r, err := s.Get(ctx, "k:y1"); err != nil || r.RequestID != "y1" {
		t.Fatalf("the record after it: %+v %v", r, err)
	}
	if aside := refusedRows(t, s); aside["intentlog_refused:00000000000000000001"] != string(bad) {
		t.Fatalf("set aside: %q", aside)
	}
}
