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
	conn, err := pgx.Connect(ctx, withoutPoolParams(base))
	if err != nil {
		tb.Fatalf("%s=%s is unreachable: %v", Env, base, err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "og_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, withoutPoolParams(base)); err == nil {
			_, _ = c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
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
