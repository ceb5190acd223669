package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// The lean layout measured against today's in docs/performance.md ("The
// ledger's write path: options measured"): the same writer, group commit,
// WAL layer and statements prepared once, with fewer rows and B-trees per
// request. Today a request inserts four rows and touches fourteen B-trees
// (the record's table and its three indexes at the claim, the table and
// the finish index again at the finish; two event rows and the receipt,
// each with the events index, the receipt with the tenant index too; the
// day's spend). The lean layout inserts two rows and
// touches nine:
//
//   - the claim: one requests row holding the claim's events packed in a
//     column (the table, its identity and request id indexes, and a
//     partial index of the unfinished that stays as small as what is in
//     flight);
//   - the finish: the record's state updated in place (and its entry in
//     the unfinished index removed), one row in done with the finish's
//     events, the stored response and the receipt, found by the one index
//     receipts are read by (tenant, request id); the day's spend.
var leanSchema = `
CREATE TABLE requests (
	identity       TEXT NOT NULL UNIQUE,
	request_id     TEXT NOT NULL UNIQUE,
	tenant         TEXT NOT NULL,
	operation      TEXT NOT NULL,
	request_sha256 TEXT NOT NULL,
	stream         INTEGER NOT NULL,
	state          TEXT NOT NULL,
	owner          TEXT NOT NULL,
	generation     INTEGER NOT NULL,
	lease_until    INTEGER NOT NULL,
	created_at     INTEGER NOT NULL,
	finished_at    INTEGER NOT NULL DEFAULT 0,
	events         BLOB
);
CREATE INDEX requests_unfinished ON requests(lease_until) WHERE finished_at = 0;
CREATE TABLE done (
	id         INTEGER PRIMARY KEY,
	request_id TEXT NOT NULL,
	tenant     TEXT NOT NULL,
	response   BLOB,
	events     BLOB,
	receipt    BLOB
);
CREATE INDEX done_by_tenant ON done(tenant, request_id);
CREATE TABLE tenant_spend (day INTEGER NOT NULL, tenant TEXT NOT NULL, charged INTEGER NOT NULL, PRIMARY KEY (day, tenant)) WITHOUT ROWID;
CREATE TABLE key_spend (day INTEGER NOT NULL, key_id TEXT NOT NULL, charged INTEGER NOT NULL, PRIMARY KEY (day, key_id)) WITHOUT ROWID;`

const (
	qLeanClaim = `INSERT INTO requests (identity, request_id, tenant, operation, request_sha256, stream, state, owner, generation, lease_until, created_at, events)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(identity) DO NOTHING`
	qLeanGet    = `SELECT ` + recordCols + ` FROM (SELECT identity, request_id, tenant, operation, request_sha256, stream, state, owner, generation, lease_until, created_at, finished_at, NULL AS response FROM requests WHERE identity = ?)`
	qLeanFinish = `UPDATE requests SET state = ?, finished_at = ?, generation = ? WHERE identity = ? AND request_id = ? AND generation = ? AND state = 'in_progress'`
	qLeanDone   = `INSERT INTO done (request_id, tenant, response, events, receipt) VALUES (?,?,?,?,?)`
)

// leanStore is the lean layout behind the store's own writer.
type leanStore struct{ s *Store }

func openLean(path string, o Options) (*leanStore, error) {
	dsn, err := dsn(path, o)
	if err != nil {
		return nil, err
	}
	w, err := sql.Open("sqlite", dsn+"&_txlock=immediate&"+url.Values{"_pragma": {"wal_autocheckpoint(0)"}}.Encode())
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	if _, err := w.Exec(leanSchema); err != nil {
		return nil, fmt.Errorf("lean schema: %w", err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	cp, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	cp.SetMaxOpenConns(1)
	s := &Store{w: w, r: r, cp: cp, ops: make(chan *op, 4096), stop: make(chan struct{}), stopped: make(chan struct{}),
		stmts: map[string]*sql.Stmt{}, committed: make(chan struct{}, 1), cpStopped: make(chan struct{})}
	if err := s.pin([]string{qLeanClaim, qLeanGet, qLeanFinish, qLeanDone, qCharge, qKeyCharge}); err != nil {
		return nil, err
	}
	go s.loop()
	go s.checkpoints()
	return &leanStore{s}, nil
}

func (l *leanStore) Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	stream := 0
	if rec.Stream {
		stream = 1
	}
	var packed []byte
	if len(events) > 0 {
		packed = packEvents(events)
	}
	args := []any{rec.Identity, rec.RequestID, rec.Tenant, rec.Operation, rec.RequestSHA256, stream, string(rec.State),
		rec.Owner, rec.Generation, ns(rec.LeaseUntil), ns(rec.CreatedAt), packed}
	var existing *ledger.Record
	created := false
	err := l.s.write(ctx, true, func(tx wtx) error {
		res, err := tx.exec(qLeanClaim, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			created = true
			return nil
		}
		existing, err = scanRecord(tx.queryRow(qLeanGet, rec.Identity))
		return err
	})
	return existing, created, err
}

func (l *leanStore) Finish(ctx context.Context, f *ledger.Finish) error {
	var resp, packed []byte
	if f.Response != nil {
		var err error
		if resp, err = ledger.EncodeResponse(f.Response); err != nil {
			return err
		}
	}
	if len(f.Events) > 0 {
		packed = packEvents(f.Events)
	}
	return l.s.write(ctx, true, func(tx wtx) error {
		res, err := tx.exec(qLeanFinish, string(f.State), ns(f.At), f.Generation, f.Identity, f.RequestID, f.Generation)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ledger.ErrStaleGeneration
		}
		if _, err := tx.exec(qLeanDone, f.RequestID, f.Tenant, resp, packed, f.Receipt); err != nil {
			return err
		}
		tx.charge(f.Tenant, f.Charge, f.At)
		tx.chargeKey(f.Key, f.Charge, f.At)
		return nil
	})
}

func (l *leanStore) Close() error {
	s := l.s
	s.once.Do(func() { close(s.stop) })
	<-s.stopped
	<-s.cpStopped
	return errors.Join(s.wc.Close(), s.w.Close())
}

// BenchmarkLeanRequestWrites is BenchmarkRequestWrites on the lean layout,
// at both syncs, from 64 clients and from one.
func BenchmarkLeanRequestWrites(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, clients := range []int{64, 1} {
			b.Run(fmt.Sprintf("sync=%s/clients=%d", sync, clients), func(b *testing.B) {
				st, err := openLean(filepath.Join(b.TempDir(), "lean.db"), Options{SyncNormal: sync == "normal"})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				ledgertest.BenchmarkRequestWrites(b, st, clients)
			})
		}
	}
}

// TestTheLeanLayoutKeepsClaimAndFence: the layout measured keeps Claim's
// one creation per identity and Finish's fence, so what it costs is what
// a store that keeps them would cost.
func TestTheLeanLayoutKeepsClaimAndFence(t *testing.T) {
	st, err := openLean(filepath.Join(t.TempDir(), "lean.db"), Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	rec := &ledger.Record{Identity: "k:a", RequestID: "r1", Tenant: "acme", Operation: "chat.completions", RequestSHA256: "x",
		State: ledger.InProgress, Owner: "o", Generation: 1}
	if _, created, err := st.Claim(ctx, rec, []ledger.Event{{RequestID: "r1", Seq: 1, Generation: 1, Type: ledger.EvCreated}}); err != nil || !created {
		t.Fatalf("first claim: created %v, %v", created, err)
	}
	twin := *rec
	twin.RequestID = "r2"
	existing, created, err := st.Claim(ctx, &twin, nil)
	if err != nil || created || existing == nil || existing.RequestID != "r1" {
		t.Fatalf("second claim: created %v, existing %+v, %v", created, existing, err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:a", RequestID: "r1", Generation: 2, State: ledger.Succeeded}); err != ledger.ErrStaleGeneration {
		t.Fatalf("finish at a generation not the record's: %v", err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:a", RequestID: "r1", Generation: 1, State: ledger.Succeeded, Tenant: "acme", Receipt: []byte("{}")}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if err := st.Finish(ctx, &ledger.Finish{Identity: "k:a", RequestID: "r1", Generation: 1, State: ledger.Succeeded}); err != ledger.ErrStaleGeneration {
		t.Fatalf("second finish: %v", err)
	}
}
