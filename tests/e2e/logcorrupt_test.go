package e2e

import (
	"bytes"
	"context"
	"database/sql"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/mock"
)

// holdBusy takes the SQLite database's write lock and keeps it until the
// returned function is called: the gateway's intent log goes on taking
// records, and the database behind it applies none of them.
func holdBusy(t *testing.T, db string) func() {
	t.Helper()
	d, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := d.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			_ = conn.Close()
			_ = d.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// logFinishes lists the terminals in an intent log file: where each frame
// starts and its request id (a record is a kind byte, its LSN, then for a
// terminal the identity and the request id as length-prefixed strings).
func logFinishes(t *testing.T, log []byte) (offs []int64, ids []string) {
	t.Helper()
	for off := int64(len("oncelog\x01")); ; {
		rec, n, err := intentlog.ReadFrame(log[off:])
		if err != nil {
			return offs, ids
		}
		if rec[0] == 'F' {
			d := rec[9:]
			l, k := binenc.Uvarint(d)
			d = d[k+int(l):]
			l, k = binenc.Uvarint(d)
			offs, ids = append(offs, off), append(ids, string(d[k:k+int(l)]))
		}
		off += int64(n)
	}
}

// ledgerFiles reads every file beside the database whose name starts as
// the intent log's do.
func ledgerFiles(t *testing.T, db string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(db + ".log*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// The gateway is killed with its answers' records only in the SQLite
// ledger's intent log (the database held busy), and a byte of a terminal
// in the middle of the log is flipped. The next `serve` refuses to start,
// naming the file and the byte offset, and deletes and cuts nothing;
// `oncegate ledger check` says the same. `oncegate ledger salvage
// --accept-loss` moves the file aside and names the request whose
// terminal was lost; after it a gateway starts, answers that key 502
// outcome_unknown, replays every other, and calls the upstream for none.
func TestCrashWithACorruptIntentLogRefusesToStart(t *testing.T) {
	w := newWorld(t, mock.Config{Tokens: 4})
	g := w.start()
	release := holdBusy(t, w.db)
	const n = 24
	var mu sync.Mutex
	ids := map[string]string{} // key → request id
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += 4 {
				key := fmt.Sprintf("busy-%d", i)
				res, body, err := g.post(context.Background(), key, key)
				if err != nil || res.StatusCode != 200 {
					errs <- fmt.Errorf("%s: %v %v %s", key, err, res, body)
					return
				}
				mu.Lock()
				ids[key] = res.Header.Get("X-Oncegate-Request-Id")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g.kill(t)
	release()
	upstream := w.mock.Stats().Requests

	logPath := w.db + ".log.1"
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	offs, finished := logFinishes(t, log)
	if len(offs) != n {
		t.Fatalf("%d terminals in the log, want %d: the database applied some", len(offs), n)
	}
	off, lost := offs[n/2], finished[n/2]
	log[off+24] ^= 0x04
	if err := os.WriteFile(logPath, log, 0o600); err != nil {
		t.Fatal(err)
	}
	before := ledgerFiles(t, w.db)
	where := fmt.Sprintf("intent log %s is corrupt at byte %d", logPath, off)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	restart := exec.CommandContext(ctx, binary, "serve", "--config", w.config, "--listen", "127.0.0.1:0", "--store", w.store)
	restart.Env = append(os.Environ(), "ONCEGATE_E2E_KEY="+apiKey)
	out, err := restart.CombinedOutput()
	if err == nil || !strings.Contains(string(out), where) {
		t.Fatalf("serve on a corrupt intent log: %v; want it to refuse naming %q\n%s", err, where, out)
	}
	if after := ledgerFiles(t, w.db); len(after) != len(before) || !bytes.Equal(after[logPath], log) {
		t.Fatalf("the refused start changed the log's files: %d files, then %d", len(before), len(after))
	}
	out, err = exec.Command(binary, "ledger", "check", "--config", w.config, "--store", w.store).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), where) {
		t.Fatalf("ledger check: exit %d\n%s", code, out)
	}
	out, err = exec.Command(binary, "ledger", "salvage", "--accept-loss", "--config", w.config, "--store", w.store).CombinedOutput()
	marked := regexp.MustCompile(`(?m)^  (\S+)\ttenant e2e\t`).FindAllStringSubmatch(string(out), -1)
	if err != nil || len(marked) != 1 || marked[0][1] != lost {
		t.Fatalf("ledger salvage: %v; want %s alone named\n%s", err, lost, out)
	}
	if aside, _ := filepath.Glob(logPath + ".damaged-*"); len(aside) != 1 {
		t.Fatalf("the damaged file moved aside: %v\n%s", aside, out)
	}

	g2 := w.start()
	for key, id := range ids {
		res, body, err := g2.post(context.Background(), key, key)
		switch {
		case err != nil:
			t.Fatal(err)
		case id == lost:
			if res.StatusCode != 502 || !strings.Contains(string(body), "outcome_unknown") {
				t.Fatalf("%s, whose terminal was lost: %d %s", key, res.StatusCode, body)
			}
		case res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "replayed":
			t.Fatalf("%s: %d %q %s", key, res.StatusCode, res.Header.Get("X-Oncegate-Dedup"), body)
		}
	}
	if got := w.mock.Stats().Requests; got != upstream {
		t.Fatalf("the upstream saw %d calls, %d before the crash: a key generated again", got, upstream)
	}
}

// exitCode is a finished command's exit code (0 for no error).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
