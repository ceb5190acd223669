package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
	"github.com/oncegate/oncegate/internal/ledger/spendsql"
)

// A database written by the first schema keeps its events and receipts
// through the migrations, and the latest schema's writes work on it.
func TestMigrationKeepsEventsAndReceipts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`, migrations[0], `INSERT INTO schema_version (version) VALUES (1)`,
		`INSERT INTO events (request_id, seq, generation, type, at, data) VALUES ('r1', 2, 1, 'attempt_reserved', 2, 'b'), ('r1', 1, 1, 'logical_request_created', 1, 'a'), ('r0', 1, 1, 'logical_request_created', 1, 'z')`,
		`INSERT INTO receipts (request_id, tenant, body) VALUES ('r1', 'acme', '{"request_id":"r1"}'), ('r0', 'acme', '{"request_id":"r0"}')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	evs, err := s.Events(ctx, "r1")
	if err != nil || len(evs) != 2 || evs[0].Seq != 1 || string(evs[1].Data) != "b" {
		t.Fatalf("events after the migration: %+v, %v", evs, err)
	}
	if body, err := s.Receipt(ctx, "acme", "r1"); err != nil || string(body) != `{"request_id":"r1"}` {
		t.Fatalf("receipt after the migration: %s, %v", body, err)
	}
	list, err := s.Receipts(ctx, "acme", 10, "")
	if err != nil || len(list) != 2 || string(list[1]) != `{"request_id":"r0"}` {
		t.Fatalf("receipts listed newest first: %q, %v", list, err)
	}
	if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: "r2", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// The latest schema's writes — one row per write's events, the
	// receipt beside them — work on the migrated database, and old rows
	// read beside new ones.
	now := time.Now()
	ev := func(seq int64, typ ledger.EventType) ledger.Event {
		return ledger.Event{RequestID: "r1", Seq: seq, Generation: 1, Type: typ, At: now, Data: []byte("n")}
	}
	rec := &ledger.Record{Identity: "k:new", RequestID: "r1", Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	if _, created, err := s.Claim(ctx, rec, nil); err != nil || !created {
		t.Fatalf("claim: %v %v", created, err)
	}
	if err := s.Append(ctx, true, ev(3, ledger.EvDispatch), ev(4, ledger.EvObserved)); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, &ledger.Finish{Identity: "k:new", RequestID: "r1", Generation: 1, State: ledger.Succeeded, At: now,
		Events: []ledger.Event{ev(5, ledger.EvTerminal)}, Receipt: []byte(`{"request_id":"r1","v":3}`), Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	evs, err = s.Events(ctx, "r1")
	if err != nil || len(evs) != 5 {
		t.Fatalf("old and new events: %+v, %v", evs, err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	if body, err := s.Receipt(ctx, "acme", "r1"); err != nil || string(body) != `{"request_id":"r1","v":3}` {
		t.Fatalf("receipt rewritten after the migration: %s, %v", body, err)
	}
	var v int
	if err := s.r.QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
}

// A database written before a response could be continued more than once
// (schema 6) keeps its conversations: each parent's continuations are
// numbered, the live one first — on a stateful route it is the one that
// went on in the parent's upstream conversation — and a new continuation
// of the same parent is the next branch.
func TestMigrationNumbersExistingContinuations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v6.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`}
	qs = append(qs, migrations[:6]...)
	qs = append(qs, `INSERT INTO schema_version (version) VALUES (6)`)
	row := func(id, parent, state string, created int) string {
		return `INSERT INTO turns (response_id, tenant, conversation, parent, depth, key_digest, fingerprint, request_sha256, state, try,
			request_id, ambiguous, status, deleted, created_at, updated_at) VALUES ('` + id + `', 'acme', 'resp_root', '` + parent + `', 2, '', 'fp-` + id +
			`', 'sha', '` + state + `', 1, 'req-` + id + `', 0, 0, 0, ` + strconv.Itoa(created) + `, 0)`
	}
	qs = append(qs, row("resp_root", "", "done", 1), row("resp_f1", "resp_root", "failed", 2), row("resp_live", "resp_root", "done", 3),
		row("resp_f2", "resp_root", "failed", 4))
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
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

// A database written before keys had versions (schema 8) keeps its keys:
// each at version 1, a rotated key's previous secret moved to where a
// lookup finds it, with its end.
func TestMigrationKeepsAKeysPreviousSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v8.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`}
	qs = append(qs, migrations[:8]...)
	qs = append(qs, `INSERT INTO schema_version (version) VALUES (8)`, migratedKeys)
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkMigratedKeys(t, s)
}

// migratedKeys are two keys as schema 8 stored them: k1 rotated with a
// grace until 2100, k2 revoked while its previous secret still worked.
const migratedKeys = `INSERT INTO keys (id, tenant, name, digest, prefix, prev_digest, prev_until, spec, expires_at, created_at, updated_at, revoked_at)
	VALUES ('k1', 'acme', 'app', 'new1', 'og-new', 'old1', 4102444800000000000, '{"budget":{}}', 0, 1, 2, 0),
	       ('k2', 'acme', 'gone', 'new2', 'og-new', 'old2', 4102444800000000000, '{"budget":{}}', 0, 1, 2, 3)`

func checkMigratedKeys(t *testing.T, s ledger.Store) {
	t.Helper()
	ctx := context.Background()
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

// A database written before teams (schema 11) keeps its keys, and gains
// the teams' table: a team created on it reads back, and so does a key
// issued for it.
func TestMigrationAddsTeams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v11.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`}
	qs = append(qs, migrations[:11]...)
	qs = append(qs, `INSERT INTO schema_version (version) VALUES (11)`,
		`INSERT INTO keys (id, tenant, name, digest, prefix, prev_digest, prev_until, spec, expires_at, created_at, updated_at, revoked_at, version, previous)
		VALUES ('k1', 'acme', 'app', 'd1', 'og-d1', '', 0, '{"budget":{}}', 0, 1, 2, 0, 4, '')`)
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkMigratedTeams(t, s)
}

func checkMigratedTeams(t *testing.T, s ledger.Store) {
	t.Helper()
	ctx := context.Background()
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
	k := &ledger.Key{ID: "k2", Tenant: "team-a", Digest: "d2", Prefix: "og-d2", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if list, err := s.Keys(ctx, ledger.KeyFilter{Tenant: "team-a"}); err != nil || len(list) != 1 || list[0].ID != "k2" {
		t.Fatalf("the team's keys: %+v %v", list, err)
	}
}

// A database written before spend facts (schema 12) gains them for every
// receipt it holds (more than one page of the migration's), and the
// report sums them as the receipts do.
func TestMigrationAddsSpendFacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v12.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_version (version INTEGER NOT NULL)`}
	qs = append(qs, migrations[:12]...)
	qs = append(qs, `INSERT INTO schema_version (version) VALUES (12)`)
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old := ledgertest.OldReceipts(t, migratedReceipts(t))
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range old {
		if _, err := tx.Exec(`INSERT INTO events (request_id, seq, last_seq, generation, type, at, tenant, data) VALUES (?,0,0,0,'receipt',0,?,?)`,
			o.RequestID, o.Tenant, o.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	began := time.Now()
	s, err := Open(path)
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
