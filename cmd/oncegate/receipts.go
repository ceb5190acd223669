package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// receipts lists a tenant's receipts from the store, or prints one;
// `receipts export` writes them for archiving (export.go).
func receipts(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "export" {
		return receiptsExport(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("receipts", "--config FILE [--store URL] [--tenant T] [--limit N] [--after ID] [ID]",
		"List a tenant's receipts, or print the one named ID, from the store. "+
			"`oncegate receipts export --before T` writes every tenant's receipts created before T as JSON lines (export -h).", "", stderr)
	path := fs.String("config", "", "configuration naming the store (required)")
	storeFlag := fs.String("store", "", "ledger to read (default: the config's store)")
	tenant := fs.String("tenant", "", "tenant whose receipts to read (default: the config's first tenant)")
	limit := fs.Int("limit", 20, "how many to list")
	after := fs.String("after", "", "continue the list after this request id (receipts are listed newest first)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" || fs.NArg() > 1 {
		fmt.Fprintln(stderr, "usage: oncegate receipts --config FILE [--tenant T] [ID]")
		return 2
	}
	pol, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	if *tenant == "" && len(pol.Tenants) > 0 {
		*tenant = pol.Tenants[0].ID
	}
	storeURL := pol.Config.Store
	if *storeFlag != "" {
		storeURL = *storeFlag
	}
	store, err := openStore(ctx, storeURL, "", true, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate receipts: %v\n", err)
		return 1
	}
	defer store.Close()
	if fs.NArg() == 1 {
		body, err := store.Receipt(ctx, *tenant, fs.Arg(0))
		if err != nil {
			fmt.Fprintf(stderr, "oncegate receipts: %s: %v\n", fs.Arg(0), err)
			return 1
		}
		r, err := receipt.Parse(body)
		if err == nil {
			err = r.Seal()
		}
		var out []byte
		if err == nil {
			out, err = r.Indented()
		}
		if err != nil {
			fmt.Fprintf(stderr, "oncegate receipts: %v\n", err)
			return 1
		}
		_, _ = stdout.Write(out)
		return 0
	}
	list, err := store.Receipts(ctx, *tenant, *limit, *after)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate receipts: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REQUEST ID\tMODEL\tATTEMPTS\tPROVIDERS\tTERMINAL\tREASON\tTOKENS\tCOST USD")
	for _, b := range list {
		var r receipt.Receipt
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
			continue
		}
		t := r.ComputeTotals()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\t%s\t%d\t%.6f\n", r.RequestID, r.Model, t.Attempts, t.Providers, r.Terminal, r.Reason, t.BillableTokens, t.CostUSD)
	}
	_ = tw.Flush()
	return 0
}
