package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/policy"
)

// loadConfig reads a configuration and the secrets it names, reporting
// every problem with its position; a nil policy comes with the exit code.
func loadConfig(path string, stderr io.Writer) (*policy.Policy, *config.Secrets, int) {
	pol, err := policy.Load(path)
	if err != nil {
		return nil, nil, reportConfigError(stderr, path, err)
	}
	secrets, err := pol.Config.ResolveSecrets(os.LookupEnv)
	if err != nil {
		return nil, nil, reportConfigError(stderr, path, err)
	}
	return pol, secrets, 0
}

// reloadCmd asks a running gateway to reload its configuration: it checks
// the file first, then posts to the gateway's admin endpoint with the
// admin key the file names.
func reloadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reload", "--config FILE --url http://HOST:PORT",
		"Check a configuration, then have the gateway at --url re-read its own configuration file (as SIGHUP does). "+
			"Tenants, keys, providers, routes and models change at once; requests in flight finish on the old ones.",
		"  the admin key, from the variable the configuration's admin_key_env names (or the file admin_key_file names)", stderr)
	path := fs.String("config", "", "the configuration the gateway runs (required)")
	addr := fs.String("url", "", "the gateway's address, e.g. http://127.0.0.1:8080 (required)")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if *path == "" || *addr == "" {
		fs.Usage()
		return 2
	}
	pol, secrets, code := loadConfig(*path, stderr)
	if pol == nil {
		return code
	}
	if secrets.AdminKey == "" {
		fmt.Fprintln(stderr, "oncegate reload: the configuration sets no admin key (admin_key_env or admin_key_file): send the gateway SIGHUP instead")
		return 2
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(*addr, "/")+"/v1/admin/reload", nil)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate reload: %v\n", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+secrets.AdminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate reload: %v\n", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "oncegate reload: HTTP %d: %s\n", res.StatusCode, body)
		return 1
	}
	fmt.Fprintf(stdout, "reloaded: %s\n", body)
	return 0
}
