package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// verify re-runs the retry engine over one or more receipts (docs/receipts.md) and
// prints every drift. Exit 0: no drift; 1: drift or unreadable receipt.
func verify(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", "--config FILE RECEIPT.json", "Re-run the retry engine over a receipt and name every drift; exit 1 on any.", "", stderr)
	path := fs.String("config", "", "configuration the receipts were produced under (required)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: oncegate verify --config FILE RECEIPT.json [RECEIPT.json ...]")
		return 2
	}
	p, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	code := 0
	for _, file := range fs.Args() {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
			code = 1
			continue
		}
		r, err := receipt.Parse(data)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
			code = 1
			continue
		}
		drifts := receipt.Verify(p, r)
		if len(drifts) == 0 {
			fmt.Fprintf(stdout, "%s: OK — request %s, %d attempt(s), terminal %s/%s, receipt sha256 %s\n",
				file, r.RequestID, len(r.Attempts), r.Terminal, r.Reason, r.ReceiptSHA256)
			continue
		}
		code = 1
		fmt.Fprintf(stdout, "%s: DRIFT — %d finding(s):\n", file, len(drifts))
		for _, d := range drifts {
			fmt.Fprintf(stdout, "  %s\n", d)
		}
	}
	return code
}
