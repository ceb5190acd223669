package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
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
