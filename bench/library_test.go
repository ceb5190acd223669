package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// The -library comparison, run small: each variant's client answers every
// request (the in-process one through an embedded gateway on the SQLite
// ledger), the table gives the CPU of client and server per request, and
// the in-process variant is the 1.00 of the ratios.
func TestTheLibraryComparisonMeasuresEachVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/oncegate and starts five processes")
	}
	var out bytes.Buffer
	if err := libraryRun(context.Background(), options{requests: 100, rounds: 1, concurrency: 4}, &out); err != nil {
		t.Fatalf("library: %v\n%s", err, out.String())
	}
	table := out.String()
	for _, row := range []string{
		`oncegate in process \(HTTPClient\)\s+\d+ µs \(client and gateway\)\s+1\.00\s+\d+\s+1\.00\s`,
		`oncegate serve over loopback\s+\d+ µs \(\d+ \+ \d+\)\s+[\d.]+\s+\d+\s+[\d.]+\s`,
		`bare proxy over loopback\s+\d+ µs \(\d+ \+ \d+\)\s+[\d.]+\s`,
		`direct \(the client alone\)\s+\d+ µs \(the client alone\)\s`,
	} {
		if !regexp.MustCompile(`(?m)^\s*` + row + `.*\s0\s*$`).MatchString(table) {
			t.Errorf("no row %s with 0 errors in:\n%s", row, table)
		}
	}
	// The gateways' CPU was read: neither is zero per request.
	if regexp.MustCompile(`(?m)^\s*oncegate (in process|serve).*\s0 µs`).MatchString(table) {
		t.Errorf("a gateway used no CPU:\n%s", table)
	}
}
