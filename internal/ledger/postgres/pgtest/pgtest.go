// Package pgtest gives tests a database of their own on the PostgreSQL
// server named by ONCEGATE_TEST_POSTGRES: a fresh schema, dropped when the
// test ends. Without the variable a test is skipped with the reason
// printed; with it, an unreachable server fails the test (CI sets it, so
// CI never skips).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names the server tests use.
const Env = "ONCEGATE_TEST_POSTGRES"

// URL returns a postgres:// URL whose search_path is a new, empty schema.
func URL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(Env)
	if base == "" {
		tb.Skipf("%s is not set: no PostgreSQL to test against (e.g. %s=postgres://postgres@127.0.0.1:5432/test?sslmode=disable)", Env, Env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, drop, err := Scratch(ctx, base, "og_test_")
	if err != nil {
		tb.Fatalf("%s=%s: %v", Env, base, err)
	}
	tb.Cleanup(drop)
	return u
}

// Scratch creates a new, empty schema named prefix and a random tag on
// the server of base, and returns base with that schema as its
// search_path, and what drops it. Tests, the soak and the benchmark each
// work in one, so that they share a server without meeting.
func Scratch(ctx context.Context, base, prefix string) (string, func(), error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, withoutPoolParams(base))
	if err != nil {
		return "", nil, fmt.Errorf("unreachable: %w", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := prefix + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, withoutPoolParams(base)); err == nil {
			_, _ = c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			_ = c.Close(ctx)
		}
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// withoutPoolParams drops pgxpool's own parameters (pool_max_conns …),
// which a plain connection would send to the server as settings.
func withoutPoolParams(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
