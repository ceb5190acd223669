// Command chaos runs the soak of internal/chaos: logical requests from the
// official SDKs and from raw clients that re-POST, through a gateway that
// is SIGKILLed and restarted while they run, in front of a mock provider
// failing a fifth of its calls — then prints every invariant with its
// count of violations, and exits 1 if any was broken. From the
// repository's root:
//
//	go run ./bench/chaos -requests 50000 -kills 20
//	go run ./bench/chaos -requests 50000 -kills 20 -replicas 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/oncegate/oncegate/internal/chaos"
)

func main() {
	requests := flag.Int("requests", 2000, "logical requests")
	workers := flag.Int("workers", 16, "clients at once")
	kills := flag.Int("kills", 3, "SIGKILLs of the gateway, spread over the run (each followed by a restart)")
	seed := flag.Uint64("seed", 1, "the seed that picks each request's client")
	replicas := flag.Int("replicas", 1, "1: one gateway on SQLite; more: gateways on PostgreSQL (-postgres) and a Redis of the soak's own, restarted at every third kill")
	pg := flag.String("postgres", envOr("ONCEGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL for -replicas > 1 (a schema of the soak's own is created and dropped)")
	keep := flag.Bool("keep", false, "keep the run's directory (configuration, ledger, gateway log) and print where it is")
	flag.Parse()
	dir, err := os.MkdirTemp("", "oncegate-chaos")
	if err != nil {
		fail(err)
	}
	if *keep {
		fmt.Println("files in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := filepath.Join(dir, "oncegate")
	build := exec.Command("go", "build", "-o", bin, "github.com/oncegate/oncegate/cmd/oncegate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fail(fmt.Errorf("go build ./cmd/oncegate: %w", err))
	}
	rep, err := chaos.Run(context.Background(), chaos.Config{Binary: bin, Dir: dir, Requests: *requests, Workers: *workers, Kills: *kills,
		Seed: *seed, Progress: os.Stdout, Replicas: *replicas, Postgres: *pg})
	if err != nil {
		fail(err)
	}
	fmt.Println()
	rep.Print(os.Stdout)
	if rep.Violations() > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chaos:", err)
	os.Exit(1)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
