// Command oncegate is an LLM gateway that owns retries: one user action
// becomes one logical request, a bounded and visible set of attempts, at
// most one committed answer and one usage receipt.
//
// Usage:
//
//	oncegate demo                             play the incident of docs/architecture.md, naive stack versus oncegate
//	oncegate serve   --config FILE            run the gateway
//	oncegate mock    [--listen ADDR]          run the fault-injecting mock provider
//	oncegate check   --config FILE            validate and print the route tables
//	oncegate verify  --config FILE RECEIPT    re-run the retry engine over a receipt
//	oncegate migrate --config FILE            apply the store's schema migrations
//	oncegate ledger  check|salvage --config FILE
//	                                          check a SQLite ledger's intent log; salvage a corrupt one
//	oncegate spend   --config FILE --url URL  print the spend report of a running gateway
//	oncegate health  [--url URL] [--ready]    ask a running gateway whether it is alive (or ready)
//	oncegate import  litellm CONFIG.yaml      print an oncegate configuration translated from a LiteLLM one
//	oncegate version                          print the version and build information
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// verbs maps each CLI verb to its implementation. Each returns the exit code.
var verbs = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"demo":     demoCmd,
	"serve":    serve,
	"mock":     mockProvider,
	"check":    check,
	"verify":   verify,
	"receipts": receipts,
	"migrate":  migrate,
	"version":  versionCmd,
	"reload":   reloadCmd,
	"health":   health,
	"spend":    spendCmd,
	"models":   modelsCmd,
	"ledger":   ledgerCmd,
	"import":   importCmd,
}

const usage = `oncegate — an LLM gateway that owns retries

usage:
  oncegate demo                               play the incident of docs/architecture.md: a naive stack versus oncegate
  oncegate serve   --config FILE              run the gateway
  oncegate mock    [--listen ADDR] [--script FILE] [--ttft D] [--interval D] [--tokens N]
                                              run the fault-injecting mock provider
  oncegate check   --config FILE [--connect]  validate a configuration and print its route tables;
                                              --connect also reaches its store and coordination
  oncegate migrate --config FILE              apply the store's schema migrations (serve does too)
  oncegate ledger check --config FILE         check a SQLite ledger's intent log as serve would at start, without
                                              starting; exit 1 if it is corrupt (serve then refuses to start)
  oncegate ledger salvage --accept-loss --config FILE
                                              recover a corrupt intent log: apply what is intact, mark the requests
                                              whose records were lost indeterminate (their keys are refused), print
                                              their ids, move the damaged files aside
  oncegate verify  --config FILE RECEIPT.json re-run the retry engine over a receipt; exit 1 on drift
  oncegate receipts --config FILE [--tenant T] [ID]
                                              list a tenant's receipts, or print one
  oncegate receipts export --config FILE --before T [--out FILE]
                                              write every receipt of the requests created before T as JSON lines,
                                              for archiving before the retention sweep deletes them
  oncegate spend   --config FILE --url URL [--group-by tenant|key|model|route|day] [--from T] [--to T] [--format table|json|csv]
                                              print a running gateway's spend report, computed from its receipts
  oncegate reload  --config FILE --url URL    have a running gateway re-read its configuration (or send it SIGHUP)
  oncegate health  [--url URL] [--ready]      ask a running gateway whether it is alive (/healthz) or ready (/readyz);
                                              exit 0 on 200, 1 otherwise (a container's HEALTHCHECK)
  oncegate import  litellm CONFIG.yaml        print an oncegate configuration translated from a LiteLLM proxy config
                                              (docs/migrating-from-litellm.md)
  oncegate models  [--json] [--family F]      list the model catalogue: prices, context windows, output limits
  oncegate version                            print the version and build information

oncegate VERB -h names a verb's arguments, flags and the environment variables it reads.
`

// run executes one CLI invocation and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args[0] = "version"
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	verb, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "oncegate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return verb(ctx, args[1:], stdout, stderr)
}
