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
	if !regexp.MustCompile(`(?m)^\s*oncegate full\s+20\s+0\s.*KiB\s+\d+\s*$`).MatchString(out.String()) {
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
