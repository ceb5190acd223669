package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
)

// The -transport comparison, run small: the bare proxy and every hop of
// fasthttp answer each request in processes of their own, each with its
// CPU per request and its ratio to the bare proxy, and the in-memory
// gateway's profile is split into its transport and its own work.
func TestTheTransportComparisonMeasuresEachHop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and starts five servers")
	}
	var out bytes.Buffer
	o := options{transport: true, requests: 1000, rounds: 1, concurrency: 4, only: "bare,memory", profiles: t.TempDir()}
	if err := transportRun(context.Background(), o, &out); err != nil {
		t.Fatalf("transport: %v\n%s", err, out.String())
	}
	table := out.String()
	for _, path := range []string{"bare proxy", "fasthttp hop", "fasthttp server, net/http client", "net/http server, fasthttp client", "oncegate memory"} {
		// path, CPU (user + kernel), CPU ratio, saved, requests/s, ratio, p50, p99, 0 errors.
		row := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + `\s+(\d+) \(\d+ \+ \d+\)\s+[\d.]+\s+[-+]\d+ µs\s+(\d+)\s+[\d.]+\s+\S+\s+\S+\s+0\s`).FindStringSubmatch(table)
		if row == nil {
			t.Errorf("no row for %q with 0 errors in:\n%s", path, table)
			continue
		}
		if n, _ := strconv.Atoi(row[2]); n == 0 {
			t.Errorf("%s: no requests per second:\n%s", path, table)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*bare proxy\s+\d+ \(\d+ \+ \d+\)\s+1\.00\s+\+0 µs\s+\d+\s+1\.00\s`).MatchString(table) {
		t.Errorf("the bare proxy is not the 1.00 of its own ratios:\n%s", table)
	}
	m := regexp.MustCompile(`oncegate memory: transport (\d+) % of its profile's CPU, background collector (\d+) %`).FindStringSubmatch(table)
	if m == nil {
		t.Fatalf("no transport share for the memory gateway:\n%s", table)
	}
	// Every request crosses the gateway's server and client: some of its
	// CPU is transport, and not all of it.
	if share, _ := strconv.Atoi(m[1]); share <= 0 || share >= 100 {
		t.Errorf("the memory gateway's transport share is %d %%:\n%s", share, table)
	}
}
