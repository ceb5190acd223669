package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/policy"
)

// serve runs the gateway until interrupted, then drains in-flight requests.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (required)")
	listen := fs.String("listen", "", "address to listen on (default: the config's listen)")
	storeFlag := fs.String("store", "", "ledger to use (default: the config's store), e.g. sqlite:///var/lib/oncegate/ledger.db")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "oncegate serve: --config FILE is required")
		return 2
	}
	pol, err := policy.Load(*path)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	secrets, err := pol.Config.ResolveSecrets(os.LookupEnv)
	if err != nil {
		return reportConfigError(stderr, *path, err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	gateway.TuneGC(os.LookupEnv)
	storeURL := pol.Config.Store
	if *storeFlag != "" {
		storeURL = *storeFlag
	}
	store, err := openStore(ctx, storeURL, false)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	defer store.Close()
	g, err := gateway.New(pol, secrets, gateway.Options{Logger: log, Ledger: store})
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	defer g.Close()
	addr := pol.Config.Listen
	if *listen != "" {
		addr = *listen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "oncegate listening on http://%s (policy %s)\n", ln.Addr(), pol.Digest[:12])
	if err := g.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "oncegate serve: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "oncegate stopped")
	return 0
}
