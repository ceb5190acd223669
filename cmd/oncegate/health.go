package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// health asks a running gateway whether it is alive (GET /healthz) or
// ready to take requests (GET /readyz, --ready): exit 0 on 200, 1 on any
// other answer or none. It needs no configuration, so a container's
// HEALTHCHECK can run it (the image has no shell and no curl).
func health(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("health", "[--url URL] [--ready] [--timeout D]",
		"Ask a running gateway whether it is alive (GET /healthz) or, with --ready, ready to take requests (GET /readyz).\n"+
			"Exit 0 when it answers 200; 1 when it answers anything else, or nothing (a container's HEALTHCHECK).", "", stderr)
	base := fs.String("url", "http://127.0.0.1:8080", "the gateway's address; a URL with a path is asked as it is")
	ready := fs.Bool("ready", false, "ask /readyz (the store and coordination answer, no drain has begun) instead of /healthz")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return parseFailed(err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	target, err := healthURL(*base, *ready)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate health: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate health: %v\n", err)
		return 2
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "oncegate health: %s: %v\n", target, err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	line := fmt.Sprintf("%s: %d %s", target, res.StatusCode, strings.TrimSpace(string(body)))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, line)
		return 1
	}
	fmt.Fprintln(stdout, line)
	return 0
}

// healthURL is the probe's URL: base's own path if it names one, else
// /healthz, or /readyz when ready.
func healthURL(base string, ready bool) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url %q: want http://HOST:PORT", base)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/healthz"
		if ready {
			u.Path = "/readyz"
		}
	}
	return u.String(), nil
}
