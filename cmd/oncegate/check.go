package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/policy"
)

// check validates a configuration (DESIGN §8.2) and prints its route
// tables and policy digests. Exit 1 lists every violation.
func check(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "oncegate check: --config FILE is required")
		return 2
	}
	p, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	if err := policy.WriteTable(stdout, p); err != nil {
		fmt.Fprintf(stderr, "oncegate check: %v\n", err)
		return 1
	}
	if _, err := p.Config.ResolveSecrets(os.LookupEnv); err != nil {
		fmt.Fprintf(stdout, "\nnote: `serve` will need these environment variables:\n%v\n", err)
	}
	fmt.Fprintln(stdout, "\nconfiguration OK")
	return 0
}

// reportConfigError prints every violation of a configuration and returns
// exit code 1.
func reportConfigError(stderr io.Writer, path string, err error) int {
	var errs config.Errors
	if errors.As(err, &errs) {
		fmt.Fprintf(stderr, "%s: %d problem(s):\n", path, len(errs))
		for _, e := range errs {
			fmt.Fprintf(stderr, "  %v\n", e)
		}
		return 1
	}
	fmt.Fprintf(stderr, "oncegate: %v\n", err)
	return 1
}
