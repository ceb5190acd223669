package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// copyFile copies src to dst, as a crash would leave it: what was written
// to the file, whether or not SQLite's connections have it cached.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A commit's frames reach the WAL file in a few writes instead of two per
// page, and nothing is held back once the write is acknowledged: a copy
// of the files taken then — the store still open, its WAL not
// checkpointed — opened with SQLite's plain VFS, holds the write, large
// rows included (a commit larger than one write can hand down).
func TestTheWALGetsACommitInFewWritesAndAllOfItBeforeTheAck(t *testing.T) {
	for _, o := range []Options{{}, {SyncNormal: true}} {
		t.Run(fmt.Sprintf("SyncNormal=%v", o.SyncNormal), func(t *testing.T) { walCommitInFewWrites(t, o) })
	}
}

// walCommitInFewWrites: at either durability, a commit reaches the WAL
// file in a handful of writes, all before it is acknowledged (at
// synchronous=NORMAL, when nothing syncs the file).
func walCommitInFewWrites(t *testing.T, o Options) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st, err := OpenWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	now := time.Now()
	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB: more than walWriteMax, less than walBufMax
	rec := &ledger.Record{Identity: "k:big", RequestID: "req-big", Tenant: "acme", Operation: "chat.completions", RequestSHA256: "d",
		State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	if _, _, err := st.Claim(ctx, rec, []ledger.Event{{RequestID: "req-big", Seq: 1, Generation: 1, Type: ledger.EvCreated, At: now, Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	in, out := walWritesIn.Load(), walWritesOut.Load()
	if err := st.Finish(ctx, &ledger.Finish{Identity: rec.Identity, RequestID: "req-big", Generation: 1, State: ledger.Succeeded, At: now,
		Response: &ledger.Response{Status: 200, ContentType: "application/json", Attempts: 1, Body: big},
		Events:   []ledger.Event{{RequestID: "req-big", Seq: 2, Generation: 1, Type: ledger.EvTerminal, At: now, Data: []byte(`{}`)}},
		Receipt:  []byte(`{"request_id":"req-big"}`), Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	madeIn, handed := walWritesIn.Load()-in, walWritesOut.Load()-out
	if madeIn < 300 || handed > madeIn/20 {
		t.Errorf("SQLite made %d WAL writes for the commit and %d were handed down; want hundreds gathered into a handful", madeIn, handed)
	}

	snap := filepath.Join(t.TempDir(), "snap.db")
	copyFile(t, path, snap)
	copyFile(t, path+"-wal", snap+"-wal")
	db, err := sql.Open("sqlite", "file:"+snap) // the default VFS: no gathering
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var state string
	var resp []byte
	if err := db.QueryRow(`SELECT state, response FROM requests WHERE request_id = 'req-big'`).Scan(&state, &resp); err != nil {
		t.Fatalf("the acknowledged finish is not in the files: %v", err)
	}
	r, err := ledger.DecodeResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if state != string(ledger.Succeeded) || !bytes.Equal(r.Body, big) {
		t.Errorf("copy holds state %q and a %d-byte body; want %q and the %d bytes written", state, len(r.Body), ledger.Succeeded, len(big))
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity check of the copy: %q, %v", check, err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM events WHERE request_id = 'req-big'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("copy holds %d event rows (%v); want 3 (created, terminal, receipt)", n, err)
	}
}

func TestSyncNormalIsTheSettingInForce(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{Options{}, 2}, {Options{SyncNormal: true}, 1}} {
		st, err := OpenWith(filepath.Join(t.TempDir(), "ledger.db"), tc.o)
		if err != nil {
			t.Fatal(err)
		}
		for name, db := range map[string]interface {
			QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
		}{"writer": st.wc, "readers": st.r} {
			var got int
			if err := db.QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&got); err != nil || got != tc.want {
				t.Errorf("%+v, %s: synchronous = %d (%v); want %d", tc.o, name, got, err, tc.want)
			}
		}
		_ = st.Close()
	}
}
