package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger/sqlite"
)

// A gateway's ledger at steady state (-steady N): a day's finished
// requests in it before the first is measured. The gateway writes a few
// requests itself, the templates; sqlite.Preload copies them N times over
// the day before, as the gateway would have written them
// (docs/performance.md, "At steady state"). The ledger is built once for
// a gateway binary and N, kept in -steady-cache, and copied for each path
// that measures on it.

// steadyTemplates is how many requests the gateway writes for Preload to
// copy.
const steadyTemplates = 16

// steadyLedger returns the path of a ledger holding n finished requests
// written by the gateway binary bin (or copied from ones it wrote),
// building it in cache unless it is there already.
func steadyLedger(ctx context.Context, bin, cache, dir, mockURL string, n int, out io.Writer) (string, error) {
	if cache == "" {
		cache = filepath.Join(os.TempDir(), "oncegate-bench-steady")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return "", err
	}
	file := filepath.Join(cache, fmt.Sprintf("ledger-%d-schema%d-%s.db", n, sqlite.Version(), sum[:12]))
	if _, err := os.Stat(file); err == nil {
		fmt.Fprintf(out, "steady state: the ledger of %d requests is %s (built before for this gateway binary)\n", n, file)
		return file, nil
	}
	start := time.Now()
	fmt.Fprintf(out, "steady state: building a ledger of %d requests in %s ...", n, file)
	tmpl := filepath.Join(dir, "template.db")
	c, err := startServe(bin, dir, "", "", "template", mockURL, "store: sqlite://template.db\nledger: {sync: normal}\n")
	if err != nil {
		return "", err
	}
	var seq atomic.Int64
	r := loadBodies(ctx, 4, steadyTemplates, path{name: "template", url: c.url, model: "bench", auth: true}, false, &seq, "A question of the day before, number ")
	c.stop() // the gateway applies its intent log as it stops
	if r.errors > 0 || r.requests != steadyTemplates {
		return "", fmt.Errorf("the template gateway answered %d of %d requests", r.requests, steadyTemplates)
	}
	tmp := file + ".tmp" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	defer os.Remove(tmp + ".lock")
	if err := copyFile(tmpl, tmp); err != nil {
		return "", err
	}
	if err := sqlite.Preload(ctx, tmp, n, 24*time.Hour); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", err
	}
	st, _ := os.Stat(file)
	fmt.Fprintf(out, " %v, %.0f MB: %.1f KB a request\n", time.Since(start).Round(time.Second), float64(st.Size())/1e6, float64(st.Size())/1e3/float64(n))
	return file, nil
}

// steadyName is a path's name at steady state: "oncegate full @1M".
func steadyName(name string, n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%s @%dM", name, n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%s @%dk", name, n/1000)
	}
	return fmt.Sprintf("%s @%d", name, n)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies src to dst (the kernel copies the bytes where it can).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// readAll reads the file at path once, into the operating system's cache.
func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}
