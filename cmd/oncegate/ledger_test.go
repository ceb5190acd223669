package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/mock"
)

const ledgerTestKey = "sk-ledger-test"

const ledgerTestConfig = `
tenants: [{id: t1, api_key_env: ONCEGATE_LEDGER_TEST_KEY}]
providers: [{id: mock, type: openai, base_url: "MOCK/v1"}]
routes:
  - {id: mock, provider: mock, model: mock-model, behavior_class: c, data_boundary: local, max_attempts: 1,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: chat, routes: [mock], retry: {max_attempts: 1, deadline: 60s}}
store: "sqlite://DB"
`

// lockedLines is a serve's stdout, read while it runs.
type lockedLines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// inProcess is a `oncegate serve` running in the test's process.
type inProcess struct {
	url    string
	stop   context.CancelFunc
	done   chan int
	stderr *lockedLines
}

// serveInProcess runs serve with cfg until the test stops it.
func serveInProcess(t *testing.T, cfg string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &lockedLines{}, &lockedLines{}
	g := &inProcess{stop: cancel, done: make(chan int, 1), stderr: errOut}
	go func() { g.done <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0"}, out, errOut) }()
	re := regexp.MustCompile(`oncegate listening on (http://\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			g.url = m[1]
			break
		}
		select {
		case code := <-g.done:
			t.Fatalf("serve exited %d:\n%s", code, errOut)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen:\n%s", errOut)
		}
	}
	t.Cleanup(func() { g.close(t) })
	return g
}

// close stops the gateway and waits for it (once).
func (g *inProcess) close(t *testing.T) {
	g.stop()
	if code, ok := <-g.done; ok {
		close(g.done)
		if code != 0 {
			t.Errorf("serve exited %d:\n%s", code, g.stderr)
		}
	}
}

// serveRefuses runs serve with cfg and returns its exit code and stderr
// once it exits; if it starts listening instead, it is stopped and the
// test fails.
func serveRefuses(t *testing.T, cfg string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &lockedLines{}, &lockedLines{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0"}, out, errOut) }()
	for {
		select {
		case code := <-done:
			return code, errOut.String()
		case <-time.After(10 * time.Millisecond):
		}
		if strings.Contains(out.String(), "oncegate listening on") {
			cancel()
			<-done
			t.Fatalf("serve started:\n%s", errOut)
		}
	}
}

func (g *inProcess) chat(t *testing.T, key string) (*http.Response, string) {
	t.Helper()
	body := `{"model":"chat","messages":[{"role":"user","content":"question ` + key + `"}]}`
	req, _ := http.NewRequest("POST", g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ledgerTestKey)
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// finishes lists the finish records of an intent log file: where each
// frame starts and its request id (the log's format: a kind byte, the LSN,
// then the identity and the request id as length-prefixed strings).
func finishes(t *testing.T, log []byte) (offs []int64, ids []string) {
	t.Helper()
	for off := int64(len("oncelog\x01")); ; {
		rec, n, err := intentlog.ReadFrame(log[off:])
		if err != nil {
			return offs, ids
		}
		if rec[0] == 'F' {
			d := rec[9:]
			l, k := binary.Uvarint(d)
			d = d[k+int(l):]
			l, k = binary.Uvarint(d)
			offs, ids = append(offs, off), append(ids, string(d[k:k+int(l)]))
		}
		off += int64(n)
	}
}

// TestLedgerCheckAndSalvageACorruptIntentLog: a gateway answers keyed
// requests whose records are then only in its intent log (a crash image:
// the database as it was before them, the log as the gateway wrote it),
// and a byte of a terminal mid-log flips. `ledger check` and serve both
// name the file and the offset, and serve does not start; `ledger salvage
// --accept-loss` moves the damaged file aside and prints the request
// whose terminal was lost; a restarted gateway answers its key 502
// outcome_unknown and replays every other, with no call upstream.
func TestLedgerCheckAndSalvageACorruptIntentLog(t *testing.T) {
	t.Setenv("ONCEGATE_LEDGER_TEST_KEY", ledgerTestKey)
	m := mock.New(mock.Config{Tokens: 4})
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(m.Close)
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	cfg := filepath.Join(dir, "oncegate.yaml")
	if err := os.WriteFile(cfg, []byte(strings.NewReplacer("MOCK", srv.URL, "DB", db).Replace(ledgerTestConfig)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The database as it is before the requests.
	serveInProcess(t, cfg).close(t)
	before := map[string][]byte{}
	for _, suffix := range []string{"", "-wal"} {
		if b, err := os.ReadFile(db + suffix); err == nil {
			before[suffix] = b
		}
	}
	g := serveInProcess(t, cfg)
	const n = 12
	ids := map[string]string{} // key → request id
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		res, body := g.chat(t, key)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", key, res.StatusCode, body)
		}
		ids[key] = res.Header.Get("X-Oncegate-Request-Id")
	}
	upstream := m.Stats().Requests
	log, err := os.ReadFile(db + ".log.1") // every record of this run, acknowledged before
	if err != nil {
		t.Fatal(err)
	}
	g.close(t)
	// The crash image, and a byte flipped in a terminal mid-log.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(db + suffix)
	}
	for suffix, b := range before {
		if err := os.WriteFile(db+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	offs, finished := finishes(t, log)
	if len(offs) != n {
		t.Fatalf("%d terminals in the log, want %d", len(offs), n)
	}
	off, lost := offs[n/2], finished[n/2]
	log[off+20] ^= 0x08
	if err := os.WriteFile(db+".log.1", log, 0o600); err != nil {
		t.Fatal(err)
	}
	where := fmt.Sprintf("intent log %s.log.1 is corrupt at byte %d", db, off)

	code, out, errOut := runCLI("ledger", "check", "--config", cfg)
	t.Logf("ledger check:\n%s", out)
	if code != 1 || !strings.Contains(out, where) || !strings.Contains(out, "lost: 1 record(s)") {
		t.Fatalf("ledger check: exit %d\n%s%s", code, out, errOut)
	}
	code, errOut = serveRefuses(t, cfg)
	t.Logf("serve:\n%s", errOut)
	if code == 0 || !strings.Contains(errOut, where) || !strings.Contains(errOut, "oncegate ledger salvage --accept-loss") {
		t.Fatalf("serve on the corrupt log: exit %d\n%s", code, errOut)
	}
	if b, err := os.ReadFile(db + ".log.1"); err != nil || !bytes.Equal(b, log) {
		t.Fatalf("the refused start changed the log (%v)", err)
	}
	if code, _, errOut = runCLI("ledger", "salvage", "--config", cfg); code != 2 || !strings.Contains(errOut, "--accept-loss") {
		t.Fatalf("salvage without --accept-loss: exit %d\n%s", code, errOut)
	}

	code, out, errOut = runCLI("ledger", "salvage", "--accept-loss", "--config", cfg)
	t.Logf("ledger salvage --accept-loss:\n%s", out)
	marked := regexp.MustCompile(`(?m)^  (\S+)\ttenant t1\t`).FindAllStringSubmatch(out, -1)
	if code != 0 || len(marked) != 1 || marked[0][1] != lost || !strings.Contains(out, where) {
		t.Fatalf("ledger salvage: exit %d, want %s alone marked\n%s%s", code, lost, out, errOut)
	}
	aside, _ := filepath.Glob(db + ".log.1.damaged-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v", aside)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, log) {
		t.Fatalf("the damaged file moved aside is not as it was (%v)", err)
	}
	if left, _ := filepath.Glob(db + ".log.[0-9]"); len(left) != 0 {
		t.Fatalf("log files left: %v", left)
	}
	if code, out, _ = runCLI("ledger", "check", "--config", cfg); code != 0 || !strings.Contains(out, "no intent log") {
		t.Fatalf("ledger check after the salvage: exit %d\n%s", code, out)
	}

	g = serveInProcess(t, cfg)
	for key, id := range ids {
		res, body := g.chat(t, key)
		switch {
		case id == lost:
			if res.StatusCode != 502 || !strings.Contains(body, "outcome_unknown") {
				t.Fatalf("%s, whose terminal was lost: %d %s", key, res.StatusCode, body)
			}
		case res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "replayed":
			t.Fatalf("%s: %d %q %s", key, res.StatusCode, res.Header.Get("X-Oncegate-Dedup"), body)
		}
	}
	if got := m.Stats().Requests; got != upstream {
		t.Fatalf("the upstream saw %d calls, %d before the salvage: a key generated again", got, upstream)
	}
}

// oncegate -h lists the ledger commands; ledger -h explains them.
func TestLedgerCommandsAreListed(t *testing.T) {
	_, out, _ := runCLI("-h")
	for _, want := range []string{"oncegate ledger check --config FILE", "oncegate ledger salvage --accept-loss --config FILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("oncegate -h does not list %q:\n%s", want, out)
		}
	}
	code, _, errOut := runCLI("ledger", "-h")
	if code != 0 || !strings.Contains(errOut, "torn last record") || !strings.Contains(errOut, "--accept-loss") {
		t.Fatalf("ledger -h: exit %d\n%s", code, errOut)
	}
	if code, _, _ := runCLI("ledger", "frobnicate"); code != 2 {
		t.Fatalf("ledger frobnicate: exit %d", code)
	}
	code, out, _ = runCLI("ledger", "check", "--config", "../../examples/quickstart.yaml", "--store", "memory://")
	if code != 0 || !strings.Contains(out, "keeps no intent log") {
		t.Fatalf("ledger check of a store with no log: exit %d\n%s", code, out)
	}
}
