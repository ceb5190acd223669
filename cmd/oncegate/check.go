package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/registry"
)

// check validates a configuration (docs/configuration.md) and prints its route
// tables and policy digests. Exit 1 lists every violation. With
// --connect it also reaches the store and the coordination, reads every
// secret, obtains each provider's credential and asks each route's
// provider, where it can be asked, whether the route's model or
// deployment exists, and says what it found; exit 1 if any cannot be
// reached or read, or a route's model does not exist.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "--config FILE [--connect]",
		"Validate a configuration whole and print every model's route table; with --connect, also reach its store and coordination and obtain each provider's credential.",
		configEnv, stderr)
	path := fs.String("config", "", "configuration file (required)")
	connect := fs.Bool("connect", false, "also reach the store and the coordination, obtain each provider's credential, ask whether each route's model exists, and report what they are")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
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
	for _, w := range p.Warnings {
		fmt.Fprintf(stdout, "\nwarning: %v\n", w)
	}
	if _, err := p.Config.ResolveSecrets(os.LookupEnv); err != nil {
		fmt.Fprintf(stdout, "\nnote: `serve` will need these secrets, which cannot be read here:\n%v\n", err)
	}
	if p.Config.Coordination == "local" && policy.IsPostgres(p.Config.Store) {
		fmt.Fprintln(stdout, "\nnote: coordination is local: run one gateway on this store (coordination: redis://… shares in-flight requests, breakers and budgets between several)")
	}
	if *connect {
		fmt.Fprintln(stdout)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		failed := false
		for _, probe := range []func(context.Context, *config.Config) (string, error){probeStore, probeCoordination} {
			line, err := probe(ctx, p.Config)
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", line, err)
				failed = true
				continue
			}
			fmt.Fprintln(stdout, line)
		}
		if secrets, err := p.Config.ResolveProviderSecrets(os.LookupEnv); err != nil {
			// A provider's credential cannot be read: it cannot be reached.
			reportConfigError(stderr, *path, err)
			failed = true
		} else {
			ready, ok := probeProviders(ctx, p, secrets, stdout, stderr)
			if !ok {
				failed = true
			}
			if !probeRouteModels(ctx, p, secrets, ready, stdout, stderr) {
				failed = true
			}
		}
		if failed {
			return 1
		}
	}
	fmt.Fprintln(stdout, "\nconfiguration OK")
	return 0
}

// tokenAuthority, when set, is where check --connect obtains Microsoft
// Entra ID tokens instead of the cloud's: this package's tests set it to
// the mock's. Nil outside tests.
var tokenAuthority *provider.TokenAuthority

// probeProviders opens every provider with its credentials, as serve
// would, obtains a credential from each auth step (a token, the AWS
// chain; a static key at once) and says which one it used — never a
// secret. It returns the endpoints whose credential was obtained, by
// provider id, and reports false if any failed.
func probeProviders(ctx context.Context, p *policy.Policy, secrets *config.Secrets, stdout, stderr io.Writer) (map[string]provider.Endpoint, bool) {
	ok, ready := true, map[string]provider.Endpoint{}
	for _, pr := range p.Providers {
		line := fmt.Sprintf("provider %s (%s)", pr.ID, pr.Type)
		ep, err := registry.Open(provider.Config{Provider: pr.Config, APIKey: secrets.ProviderKeys[pr.ID], Lookup: os.LookupEnv, Authority: tokenAuthority})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", line, err)
			ok = false
			continue
		}
		line += " at " + ep.BaseURL()
		auth := ep.Auth()
		if auth == nil {
			fmt.Fprintf(stdout, "%s: no credential (requests carry none)%s\n", line, extraSources(pr.Config))
			ready[pr.ID] = ep
			continue
		}
		if err := auth.Ready(ctx); err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", line, auth.Describe(), err)
			ok = false
			continue
		}
		fmt.Fprintf(stdout, "%s: %s%s\n", line, auth.Describe(), extraSources(pr.Config))
		ready[pr.ID] = ep
	}
	return ready, ok
}

// extraSources says where a provider's extra headers and query
// parameters come from: the literal text, or an env or file's name.
func extraSources(c *config.Provider) string {
	var parts []string
	for _, v := range c.Headers {
		if v.Secret {
			parts = append(parts, "header "+v.Name+" from "+v.Source())
		} else {
			parts = append(parts, "header "+v.Name)
		}
	}
	for _, v := range c.Query {
		if v.Secret {
			parts = append(parts, "query "+v.Name+" from "+v.Source())
		} else {
			parts = append(parts, "query "+v.Name)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// probeStore reaches the configured store and describes it.
func probeStore(ctx context.Context, c *config.Config) (string, error) {
	switch s := c.Store; {
	case s == "memory://":
		return "store memory://: in this process only (nothing outlives it)", nil
	case strings.HasPrefix(s, "sqlite://"):
		path := strings.TrimPrefix(s, "sqlite://")
		info, err := sqlite.Probe(path)
		line := "store " + s
		switch {
		case err != nil:
			return line, err
		case !info.Exists:
			return fmt.Sprintf("%s: no file yet; serve creates it at schema version %d", line, sqlite.Version()), nil
		}
		line = fmt.Sprintf("%s: %d bytes, schema version %d of %d", line, info.Bytes, info.SchemaVersion, sqlite.Version())
		if info.HeldBy != "" {
			line += fmt.Sprintf("; open in a gateway now (pid %s): a second one on it will refuse to start", info.HeldBy)
		}
		return line, nil
	default:
		line := "store " + postgres.Redact(s)
		info, err := postgres.Probe(ctx, s)
		if err != nil {
			return line, err
		}
		state := "up to date"
		switch v := info.SchemaVersion; {
		case v < postgres.Version():
			state = "serve (or oncegate migrate) applies the rest"
		case v > postgres.Version():
			return line, fmt.Errorf("schema version %d is newer than this binary's %d: upgrade oncegate", v, postgres.Version())
		}
		return fmt.Sprintf("%s: PostgreSQL %s, schema version %d of %d (%s)", line, info.ServerVersion, info.SchemaVersion, postgres.Version(), state), nil
	}
}

// probeCoordination reaches the configured coordination and describes it.
func probeCoordination(ctx context.Context, c *config.Config) (string, error) {
	if c.Coordination == "local" {
		return "coordination local: in this process only", nil
	}
	line := "coordination " + redis.Redact(c.Coordination)
	info, err := redis.Probe(ctx, c.Coordination)
	if err != nil {
		return line, err
	}
	if info.Detail != "" {
		line += ": " + info.Detail
	}
	return fmt.Sprintf("%s: Redis %s, ping %v", line, info.Version, info.Ping.Round(10*time.Microsecond)), nil
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
