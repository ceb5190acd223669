package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/breaker"
)

// TestMain lets the test binary be the bare proxy too, as the benchmark's
// own binary is (startProxy runs os.Executable with proxyEnv set).
func TestMain(m *testing.M) {
	if target := os.Getenv(proxyEnv); target != "" {
		if err := serveBareProxy(target); err != nil {
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// The benchmark's modes, run small: every path answers without error,
// the table has its rows and ratios, the gateways' profiles give a stage
// budget, streams and large bodies are measured from the servers' /proc.
func TestTheBenchmarkMeasuresEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and starts four servers")
	}
	ctx := context.Background()
	profiles := t.TempDir()
	var out bytes.Buffer
	if err := run(ctx, options{requests: 60, rounds: 1, lone: 10, concurrency: 4, profiles: profiles}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	table := out.String()
	for _, path := range []string{"direct", "bare proxy", "oncegate memory", "oncegate full", "oncegate normal"} {
		row := regexp.MustCompile(`(?m)^\s*` + path + `\s+\d+\s+[\d.]+\s.*\s0\s+.*$`).FindString(table)
		if row == "" {
			t.Errorf("no row for %q with 0 errors in:\n%s", path, table)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*bare proxy\s+\d+\s+1\.00\s`).MatchString(table) {
		t.Errorf("the bare proxy is not the 1.00 of its own ratio:\n%s", table)
	}
	if !regexp.MustCompile(`(?m)^\s*oncegate full\s.*\d+ µs \(\d+ \+ \d+\)`).MatchString(table) {
		t.Errorf("no CPU per request for the gateway:\n%s", table)
	}

	var stages bytes.Buffer
	// 60 measured requests, 60 of warm-up, 10 from the lone client.
	if err := stageBudget(filepath.Join(profiles, "oncegate-full.cpu"), 130, &stages); err != nil {
		t.Fatalf("stages: %v", err)
	}
	for _, want := range []string{"ledger (claim, events, finish, checkpoints)", "other", "total"} {
		if !strings.Contains(stages.String(), want) {
			t.Errorf("stage budget lacks %q:\n%s", want, stages.String())
		}
	}

	out.Reset()
	if err := streamsRun(ctx, options{streams: 20, ttft: 20 * time.Millisecond, interval: 5 * time.Millisecond, tokens: 3, only: "direct,full"}, &out); err != nil {
		t.Fatalf("streams: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^\s*oncegate full\s+20\s+0\s.*MiB\s+-?[\d.]+ KiB\s+-?[\d.]+ KiB\s+-?[\d.]+ KiB\s+\d+\s*$`).MatchString(out.String()) {
		t.Errorf("streams table:\n%s", out.String())
	}

	out.Reset()
	if err := bodiesRun(ctx, options{bodies: 2, bodyBytes: 200_000, only: "full"}, &out); err != nil {
		t.Fatalf("bodies: %v\n%s", err, out.String())
	}
	if !regexp.MustCompile(`(?m)^\s*oncegate full\s+6\s+0\s+\d+ MiB\s+\d+ MiB\s`).MatchString(out.String()) {
		t.Errorf("bodies table:\n%s", out.String())
	}
}

// The amplification table, run small, measures the fallback case for
// real: with a fallback provider and the primary's last attempt left for
// it, every user action succeeds at 50 % primary failure, and the
// primary's retries stay within its budget's bound — the same run without
// the fallback loses actions.
func TestTheAmplificationTableMeasuresAFallbackProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a gateway and two mock providers")
	}
	o := options{actions: 200, concurrency: 8, failures: "50", stacks: "oncegate,fallback-last",
		budget: breaker.BudgetConfig{Ratio: 0.1, MinPerSecond: 10, Window: 10 * time.Second}}
	ctx := context.Background()
	alone, err := amplifyRun(ctx, o, stackOncegate, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := amplifyRun(ctx, o, stackFallbackLast, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("alone: %d of %d ok, %d calls; with the fallback: %d ok, %d calls, %d on the primary (%d firsts) in %v",
		alone.ok, o.actions, alone.calls, fb.ok, fb.calls, fb.primary, fb.primaryFirsts, fb.elapsed)
	if fb.ok != int64(o.actions) {
		t.Errorf("with a healthy fallback, %d of %d user actions succeeded; want all", fb.ok, o.actions)
	}
	if alone.ok >= int64(o.actions) {
		t.Errorf("without a fallback, all %d actions succeeded at 50 %% failure: the primary did not fail", o.actions)
	}
	if retries, bound := fb.primary-fb.primaryFirsts, budgetBound(o.budget, fb.primaryFirsts, fb.elapsed); float64(retries) > bound {
		t.Errorf("the primary took %d retries; its budget admits %.0f", retries, bound)
	}
	if fb.calls == fb.primary {
		t.Errorf("no call reached the fallback provider")
	}

	var out bytes.Buffer
	if err := amplification(ctx, o, &out); err != nil {
		t.Fatalf("amplification: %v\n%s", err, out.String())
	}
	for _, stack := range []string{"oncegate", "fallback-last"} {
		if !regexp.MustCompile(`(?m)^\s*50%\s+` + stack + `\s+[\d.]+%\s+[\d.]+\s+[\d.]+\s+\d+\s+\d+\s`).MatchString(out.String()) {
			t.Errorf("no row for %s at 50 %% in:\n%s", stack, out.String())
		}
	}
}

// -steady's ledger, built small: the copies are what the gateway's own
// requests left — a record with its stored response, its claim's and its
// finish's rows of events, a receipt, their charge in the day's spend —
// with ids and times of their own; the gateway serves on it (a copy's
// identity is one it knows), `oncegate ledger check` finds it intact and
// `oncegate verify` accepts a copy's receipt.
func TestTheSteadyLedgerIsTheGatewaysOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and runs it twice")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, mockURL, err := startMock(ctx, 0, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := buildGateway(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 320
	var out bytes.Buffer
	built, err := steadyLedger(ctx, bin, t.TempDir(), dir, mockURL, n, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	db := filepath.Join(dir, "steady.db")
	if err := copyFile(built, db); err != nil {
		t.Fatal(err)
	}
	q := func(path, query string, args ...any) []string {
		t.Helper()
		h, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		rows, err := h.Query(query, args...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		return got
	}
	// A request's shape: its record's state and stored response, its
	// rows of events (seq, type, dispatch and observation counts), its
	// receipt's tenant — the same for the gateway's requests and the
	// copies.
	const shape = `SELECT r.state || '|' || (r.response IS NOT NULL) || '|' || r.owner || '|' ||
		(SELECT group_concat(e.seq || ':' || e.last_seq || ':' || e.type || ':' || e.dispatched || ':' || e.observed || ':' || COALESCE(e.tenant, '') || ':' || (e.at > 0), ',')
		 FROM events e WHERE e.request_id = r.request_id) AS s
		FROM requests r`
	template := q(filepath.Join(dir, "template.db"), shape+` LIMIT 1`)
	shapes := q(db, `SELECT DISTINCT s FROM (`+shape+`)`)
	if len(template) != 1 || len(shapes) != 1 || shapes[0] != template[0] {
		t.Errorf("the copies' shapes %q, the gateway's request's %q", shapes, template)
	}
	count := func(query string) string { return strings.Join(q(db, query), ",") }
	if got, want := count(`SELECT COUNT(*) FROM requests`), strconv.Itoa(n+steadyTemplates); got != want {
		t.Errorf("%s records, want %s", got, want)
	}
	if got := count(`SELECT COUNT(DISTINCT identity) || ',' || COUNT(DISTINCT request_id) || ',' || COUNT(DISTINCT request_sha256) FROM requests`); got != fmt.Sprintf("%d,%d,%d", n+steadyTemplates, n+steadyTemplates, n+steadyTemplates) {
		t.Errorf("distinct identities, request ids, bodies: %s", got)
	}
	perRequest := q(filepath.Join(dir, "template.db"), `SELECT SUM(charged) / 16 FROM tenant_spend`)
	if got := q(db, `SELECT SUM(charged) / `+strconv.Itoa(n+steadyTemplates)+` FROM tenant_spend`); len(perRequest) != 1 || len(got) != 1 || got[0] != perRequest[0] {
		t.Errorf("spend per request %v, the gateway's %v", got, perRequest)
	}
	// Every receipt has its spend facts, as a finish writes them.
	if got, want := count(`SELECT COUNT(*) FROM receipt_spend`), count(`SELECT COUNT(*) FROM events WHERE seq = 0 AND type = 'receipt'`); got != want {
		t.Errorf("%s receipts have spend facts, of %s", got, want)
	}
	if got := count(`SELECT COUNT(*) FROM receipt_spend s JOIN events e ON e.request_id = s.request_id AND e.seq = 0 WHERE s.tenant != e.tenant`); got != "0" {
		t.Errorf("%s receipts' facts name another tenant", got)
	}
	if got := count(`PRAGMA integrity_check`); got != "ok" {
		t.Errorf("integrity check: %s", got)
	}
	oldest := q(db, `SELECT request_id || ' ' || identity FROM requests ORDER BY created_at LIMIT 1`)
	if len(oldest) != 1 || !strings.Contains(count(`SELECT data FROM events WHERE seq = 0 AND request_id = '`+strings.Fields(oldest[0])[0]+`'`), strings.TrimPrefix(strings.Fields(oldest[0])[1], "f:")) {
		t.Fatalf("the oldest copy's receipt does not name its fingerprint: %v", oldest)
	}
	copyID := strings.Fields(oldest[0])[0]

	// The gateway serves on it.
	c, err := startServe(bin, dir, "", "", "steady", mockURL, "store: sqlite://steady.db\nledger: {sync: full}\n")
	if err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	r := load(ctx, 4, 40, path{name: "steady", url: c.url, model: "bench", auth: true}, false, &seq)
	c.stop()
	if r.errors != 0 || r.requests != 40 {
		t.Fatalf("the gateway on the steady ledger answered %d of 40 (%d errors)", r.requests, r.errors)
	}
	cfg := filepath.Join(dir, "steady.yaml")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "BENCH_KEY="+benchKey, "BENCH_ADMIN_KEY="+benchAdminKey)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("oncegate %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	if got := run("ledger", "check", "--config", cfg); !strings.Contains(got, "steady.db") {
		t.Errorf("ledger check: %s", got)
	}
	rc := filepath.Join(dir, "receipt.json")
	if err := os.WriteFile(rc, []byte(run("receipts", "--config", cfg, copyID)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := run("verify", "--config", cfg, rc); !strings.Contains(got, "OK — request "+copyID) {
		t.Errorf("verify: %s", got)
	}
}
