package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

const exportConfig = `
store: sqlite://ledger.db
tenants: [{id: acme, api_key_env: EXPORT_TEST_KEY}, {id: globex, api_key_env: EXPORT_TEST_KEY2}]
providers: [{id: p, type: openai, base_url: "UPSTREAM/v1"}]
routes:
  - id: r
    provider: p
    model: m
    behavior_class: c
    data_boundary: external
    capabilities: {input: [text], streaming: true, max_context_tokens: 128000, max_output_tokens: 4096}
    max_attempts: 2
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}
models: [{name: chat, routes: [r], retry: {max_attempts: 2, deadline: 30s}}]
`

// runExportGateway writes the configuration in dir and serves it with a
// gateway whose clock is clk; it returns the configuration's path, the
// gateway's URL and what stops it.
func runExportGateway(t *testing.T, dir string, clk clock.Clock) (string, string, func()) {
	t.Helper()
	m := mock.New(mock.Config{Tokens: 4})
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(exportConfig, "UPSTREAM", srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := pol.Config.ResolveSecrets(func(k string) (string, bool) { return "sk-" + k, true })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(pol, secrets, gateway.Options{Ledger: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Serve(ctx, ln); close(done) }()
	return path, "http://" + ln.Addr().String(), func() { cancel(); <-done; g.Close(); _ = st.Close() }
}

// chat sends one chat request as the tenant of key and returns its
// request id.
func chat(t *testing.T, url, key, text string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"`+text+`"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("chat: %d", res.StatusCode)
	}
	return res.Header.Get("X-Oncegate-Request-Id")
}

// receipts export --before T writes the receipts of every tenant's
// requests created before T, oldest first, one canonical receipt a line;
// each line verifies as a receipt file (digests included), and none of a
// later request is written.
func TestReceiptsExportWritesVerifiableJSONLines(t *testing.T) {
	dir := t.TempDir()
	off := &clock.Offset{}
	cfg, url, stop := runExportGateway(t, dir, off)
	old := []string{chat(t, url, "sk-EXPORT_TEST_KEY", "one"), chat(t, url, "sk-EXPORT_TEST_KEY2", "two"), chat(t, url, "sk-EXPORT_TEST_KEY", "three")}
	before := off.Now().Add(24 * time.Hour)
	off.Advance(48 * time.Hour)
	later := chat(t, url, "sk-EXPORT_TEST_KEY", "four")
	stop()

	code, out, errOut := runCLI("receipts", "export", "--config", cfg, "--before", before.Format(time.RFC3339Nano))
	if code != 0 || !strings.Contains(errOut, "3 receipt(s)") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for i := 0; sc.Scan(); i++ {
		line := sc.Bytes()
		r, err := receipt.Parse(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		canonical, err := r.Canonical()
		if err != nil || string(canonical) != string(line) {
			t.Fatalf("line %d is not the receipt's canonical encoding: %v", i+1, err)
		}
		file := filepath.Join(dir, r.RequestID+".json")
		if err := os.WriteFile(file, line, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, vout, verr := runCLI("verify", "--config", cfg, file); code != 0 || !strings.Contains(vout, "OK") {
			t.Fatalf("line %d does not verify: exit %d\n%s%s", i+1, code, vout, verr)
		}
		ids = append(ids, r.RequestID)
	}
	if strings.Join(ids, " ") != strings.Join(old, " ") {
		t.Fatalf("exported %v, want %v (oldest first), never %s", ids, old, later)
	}

	// --out writes the same lines to a file; a date reads as its 00:00 UTC.
	file := filepath.Join(dir, "archive.jsonl")
	if code, _, errOut := runCLI("receipts", "export", "--config", cfg, "--before", before.Format(time.RFC3339Nano), "--out", file); code != 0 {
		t.Fatalf("--out: exit %d\n%s", code, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != out {
		t.Fatalf("--out wrote %q, %v", b, err)
	}
	next := before.Add(48 * time.Hour).Format(time.DateOnly)
	if code, out, errOut := runCLI("receipts", "export", "--config", cfg, "--before", next); code != 0 || strings.Count(out, "\n") != 4 {
		t.Fatalf("--before %s: exit %d, %d lines\n%s", next, code, strings.Count(out, "\n"), errOut)
	}
	for _, bad := range [][]string{{"--config", cfg}, {"--config", cfg, "--before", "last tuesday"}} {
		if code, _, _ := runCLI(append([]string{"receipts", "export"}, bad...)...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
}

// check refuses a receipt_retention it cannot read, naming its position.
func TestCheckRefusesABadReceiptRetention(t *testing.T) {
	for value, msg := range map[string]string{"-1h": "negative duration", "90d": "malformed duration", "90": "want a duration"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "gw.yaml")
		cfg := strings.ReplaceAll(exportConfig, "UPSTREAM", "http://127.0.0.1:1") + "ledger: {receipt_retention: " + value + "}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI("check", "--config", path)
		if code != 1 || !strings.Contains(errOut, path+":15:29: ledger.receipt_retention: "+msg) {
			t.Fatalf("receipt_retention %s: exit %d\n%s", value, code, errOut)
		}
	}
}
