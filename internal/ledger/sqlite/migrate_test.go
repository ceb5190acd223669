package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
)

// A database written by the first schema keeps its events and receipts
// through the migration to the second, and the second's writes work on it.
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
	if err != nil || len(list) != 2 || string(list[0]) != `{"request_id":"r0"}` {
		t.Fatalf("receipts listed in request-id order: %q, %v", list, err)
	}
	if err := s.PutReceipt(ctx, "acme", "r2", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := s.r.QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
}
