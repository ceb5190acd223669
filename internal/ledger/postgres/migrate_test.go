package postgres

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
)

// A database written before a response could be continued more than once
// (schema 4) keeps its conversations: each parent's continuations are
// numbered, the live one first — on a stateful route it is the one that
// went on in the parent's upstream conversation — and a new continuation
// of the same parent is the next branch.
func TestMigrationNumbersExistingContinuations(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE oncegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`}
	qs = append(qs, migrations[:4]...)
	qs = append(qs, `INSERT INTO oncegate_schema (version) VALUES (1), (2), (3), (4)`)
	row := func(id, parent, state string, created int) string {
		return `INSERT INTO turns (response_id, tenant, conversation, parent, depth, key_digest, fingerprint, request_sha256, state, try,
			request_id, ambiguous, status, deleted, created_at, updated_at) VALUES ('` + id + `', 'acme', 'resp_root', '` + parent + `', 2, '', 'fp-` + id +
			`', 'sha', '` + state + `', 1, 'req-` + id + `', 0, 0, 0, ` + strconv.Itoa(created) + `, 0)`
	}
	qs = append(qs, row("resp_root", "", "done", 1), row("resp_f1", "resp_root", "failed", 2), row("resp_live", "resp_root", "done", 3),
		row("resp_f2", "resp_root", "failed", 4))
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = conn.Close(ctx)

	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, want := range map[string]int{"resp_root": 0, "resp_live": 0, "resp_f1": 1, "resp_f2": 2} {
		if got, err := s.Turn(ctx, "acme", id); err != nil || got.Branch != want {
			t.Fatalf("%s after the migration: %+v %v, want branch %d", id, got, err, want)
		}
	}
	next := &ledger.Turn{ResponseID: "resp_next", Tenant: "acme", Conversation: "resp_root", Parent: "resp_root", Depth: 2,
		Fingerprint: "fp-next", State: ledger.TurnPending, Try: 1, CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if _, created, err := s.BeginTurn(ctx, next); err != nil || !created || next.Branch != 3 {
		t.Fatalf("a new continuation: %v %v, branch %d", created, err, next.Branch)
	}
}

// A database written before keys had versions (schema 6) keeps its keys:
// each at version 1, a rotated key's previous secret moved to where a
// lookup finds it, with its end; a revoked key's is dropped.
func TestMigrationKeepsAKeysPreviousSecret(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE oncegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`}
	qs = append(qs, migrations[:6]...)
	qs = append(qs, `INSERT INTO oncegate_schema (version) VALUES (1), (2), (3), (4), (5), (6)`,
		`INSERT INTO keys (id, tenant, name, digest, prefix, prev_digest, prev_until, spec, expires_at, created_at, updated_at, revoked_at)
		VALUES ('k1', 'acme', 'app', 'new1', 'og-new', 'old1', 4102444800000000000, '{"budget":{}}', 0, 1, 2, 0),
		       ('k2', 'acme', 'gone', 'new2', 'og-new', 'old2', 4102444800000000000, '{"budget":{}}', 0, 1, 2, 3)`)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = conn.Close(ctx)
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	until := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []string{"new1", "old1"} {
		k, err := s.KeyByDigest(ctx, d)
		if err != nil || k.ID != "k1" || k.Version != 1 || len(k.Previous) != 1 || k.Prev("old1") == nil || !k.Prev("old1").Until.Equal(until) {
			t.Fatalf("by digest %s after the migration: %+v %v", d, k, err)
		}
	}
	if _, err := s.KeyByDigest(ctx, "old2"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a revoked key's previous secret after the migration: %v", err)
	}
	k, _ := s.Key(ctx, "k1")
	k.Name = "renamed"
	if err := s.UpdateKey(ctx, k); err != nil || k.Version != 2 {
		t.Fatalf("a write at version 1 after the migration: %v, version %d", err, k.Version)
	}
}

// A database written before teams (schema 9) keeps its keys, and gains
// the teams' table: a team created on it reads back, and so does a key
// issued for it.
func TestMigrationAddsTeams(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE oncegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`}
	qs = append(qs, migrations[:9]...)
	qs = append(qs, `INSERT INTO oncegate_schema (version) VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9)`,
		`INSERT INTO keys (id, tenant, name, digest, prefix, prev_digest, prev_until, spec, expires_at, created_at, updated_at, revoked_at, version, previous)
		VALUES ('k1', 'acme', 'app', 'd1', 'og-d1', '', 0, '{"budget":{}}', 0, 1, 2, 0, 4, '')`)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = conn.Close(ctx)
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if k, err := s.Key(ctx, "k1"); err != nil || k.Version != 4 || k.Tenant != "acme" {
		t.Fatalf("a key after the migration: %+v %v", k, err)
	}
	if list, err := s.Tenants(ctx); err != nil || len(list) != 0 {
		t.Fatalf("teams right after the migration: %+v %v", list, err)
	}
	now := time.Now().UTC()
	tm := &ledger.Tenant{ID: "team-a", Name: "A", CreatedAt: now, UpdatedAt: now, Spec: ledger.TenantSpec{Budget: ledger.KeyBudget{CostUSDPerDay: 1}}}
	if err := s.CreateTenant(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Tenant(ctx, "team-a"); err != nil || got.Version != 1 || got.Spec.Budget.CostUSDPerDay != 1 {
		t.Fatalf("a team created after the migration: %+v %v", got, err)
	}
}

// A database written before spend facts (schema 10) gains them for every
// receipt it holds (more than one page of the migration's), and the
// report sums them as the receipts do.
func TestMigrationAddsSpendFacts(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE oncegate_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`}
	qs = append(qs, migrations[:10]...)
	qs = append(qs, `INSERT INTO oncegate_schema (version) SELECT generate_series(1, 10)`)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old := ledgertest.OldReceipts(t, migratedReceipts(t))
	var ids, tenants []string
	var bodies [][]byte
	for _, o := range old {
		ids, tenants, bodies = append(ids, o.RequestID), append(tenants, o.Tenant), append(bodies, o.Body)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO receipts (request_id, tenant, body) SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])`,
		ids, tenants, bodies); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	began := time.Now()
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("migrated %d receipts in %s", len(old), time.Since(began).Round(time.Millisecond))
	ledgertest.CheckMigratedSpend(t, s, old)
}

// migratedReceipts is how many receipts TestMigrationAddsSpendFacts
// stores before the migration: more than two of its pages, or
// ONCEGATE_MIGRATE_RECEIPTS (docs/spend.md gives the time at 1,000,000).
func migratedReceipts(t *testing.T) int {
	if s := os.Getenv("ONCEGATE_MIGRATE_RECEIPTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("ONCEGATE_MIGRATE_RECEIPTS=%q: %v", s, err)
		}
		return n
	}
	return 2*spendsql.BackfillPage + 10
}
