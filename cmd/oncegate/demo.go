package main

import (
	"context"
	"fmt"
	"io"

	"github.com/oncegate/oncegate/internal/demo"
)

// demoCmd plays docs/architecture.md's incident against in-process mock providers.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: oncegate demo (no arguments)")
		return 2
	}
	if err := demo.Run(ctx, stdout); err != nil {
		fmt.Fprintf(stderr, "oncegate demo: %v\n", err)
		return 1
	}
	return 0
}
