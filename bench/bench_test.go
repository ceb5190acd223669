package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
