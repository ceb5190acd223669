package main

import (
	"context"
	"fmt"
	"io"

	"github.com/oncegate/oncegate/internal/demo"
)

// demoCmd plays docs/architecture.md's incident against in-process mock providers.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "", "Play the incident of docs/architecture.md against a naive retry stack and against oncegate, on built-in mock providers, and print the outcome and the receipts. Needs no configuration.", "", stderr)
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "oncegate demo takes no arguments")
		return 2
	}
	if err := demo.Run(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "oncegate demo: %v\n", err)
		return 1
	}
	return 0
}
