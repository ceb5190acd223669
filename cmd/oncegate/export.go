package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// exportPage is how many receipts one read of the store returns.
const exportPage = 500

// receiptsExport writes the receipts of the requests created before a
// time as JSON lines — one sealed, canonical receipt a line, oldest
// first, every tenant's — for archiving before the retention sweep
// deletes them (docs/receipts.md, "Retention").
func receiptsExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("receipts export", "--config FILE --before T [--store URL] [--out FILE]",
		"Write the receipts of every tenant's requests created before T as JSON lines, one canonical receipt a line, "+
			"oldest first: what the retention sweep (ledger.receipt_retention) deletes once T is that far in the past. "+
			"Each line verifies as a receipt file does (oncegate verify).", "", stderr)
	path := fs.String("config", "", "configuration naming the store (required)")
	storeFlag := fs.String("store", "", "ledger to read (default: the config's store)")
	beforeFlag := fs.String("before", "", "export the requests created before this time: RFC 3339, or a date (2026-01-31, 00:00 UTC) (required)")
	out := fs.String("out", "", "file to write, whole or not at all (default: stdout)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" || *beforeFlag == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: oncegate receipts export --config FILE --before T [--store URL] [--out FILE]")
		return 2
	}
	before, err := parseTime(*beforeFlag)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate receipts export: --before: %v\n", err)
		return 2
	}
	pol, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	storeURL := pol.Config.Store
	if *storeFlag != "" {
		storeURL = *storeFlag
	}
	store, err := openStore(ctx, storeURL, "", true, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate receipts export: %v\n", err)
		return 1
	}
	defer store.Close()
	n, err := exportTo(*out, stdout, func(w io.Writer) (int, error) { return exportReceipts(ctx, store, before, w) })
	if err != nil {
		fmt.Fprintf(stderr, "oncegate receipts export: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "oncegate receipts export: %d receipt(s) of requests created before %s\n", n, before.Format(time.RFC3339))
	return 0
}

// parseTime reads an RFC 3339 time or a UTC date.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time or a date (2026-01-31), found %q", s)
	}
	return t, nil
}

// exportReceipts writes the receipts of the requests created before
// `before`, a page at a time, and returns how many.
func exportReceipts(ctx context.Context, store ledger.Store, before time.Time, w io.Writer) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	var after *ledger.DatedReceipt
	for {
		page, err := store.ReceiptsBefore(ctx, before, after, exportPage)
		if err != nil {
			return n, err
		}
		for _, d := range page {
			line, err := canonicalReceipt(d.Body)
			if err != nil {
				return n, fmt.Errorf("receipt %s: %w", d.RequestID, err)
			}
			_, _ = bw.Write(line)
			if err := bw.WriteByte('\n'); err != nil {
				return n, err
			}
			n++
		}
		if len(page) < exportPage {
			return n, bw.Flush()
		}
		after = &page[len(page)-1]
	}
}

// canonicalReceipt is a stored receipt sealed — its totals and digests
// computed again, as GET /v1/receipts/{id} serves it (a replay counted
// after the terminal changed it) — in its canonical encoding.
func canonicalReceipt(body []byte) ([]byte, error) {
	r, err := receipt.Parse(body)
	if err != nil {
		return nil, err
	}
	if err := r.Seal(); err != nil {
		return nil, err
	}
	return r.Canonical()
}

// exportTo runs write on stdout, or on a new file at path that replaces
// it only once it is written whole and on the disk.
func exportTo(path string, stdout io.Writer, write func(io.Writer) (int, error)) (int, error) {
	if path == "" {
		return write(stdout)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, err
	}
	n, err := write(f)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return 0, err
	}
	return n, nil
}
