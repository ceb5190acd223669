package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncegate/oncegate/internal/ledger"
)

// ns and fromNS store times as the ledger package says.
var ns, fromNS = ledger.UnixNano, ledger.FromUnixNano

// eventArrays are events as the column arrays the statements unnest.
type eventArrays struct {
	ids   []string
	seqs  []int64
	gens  []int64
	types []string
	ats   []int64
	data  [][]byte
}

func arrays(evs []ledger.Event) eventArrays {
	a := eventArrays{ids: make([]string, len(evs)), seqs: make([]int64, len(evs)), gens: make([]int64, len(evs)),
		types: make([]string, len(evs)), ats: make([]int64, len(evs)), data: make([][]byte, len(evs))}
	for i, e := range evs {
		a.ids[i], a.seqs[i], a.gens[i], a.types[i], a.ats[i], a.data[i] = e.RequestID, e.Seq, e.Generation, string(e.Type), ns(e.At), e.Data
	}
	return a
}

// args are the arrays as statement arguments, numbered from n.
func (a eventArrays) args() []any { return []any{a.ids, a.seqs, a.gens, a.types, a.ats, a.data} }

// eventsFrom selects the unnested event arrays at parameters $n…$n+5.
func eventsFrom(n int) string {
	return fmt.Sprintf(`SELECT * FROM unnest($%d::text[], $%d::bigint[], $%d::bigint[], $%d::text[], $%d::bigint[], $%d::bytea[])
		AS e(request_id, seq, generation, type, at, data)`, n, n+1, n+2, n+3, n+4, n+5)
}

const recordCols = `identity, request_id, tenant, operation, request_sha256, stream, state, owner, generation, lease_until, created_at, finished_at, response`

func recordArgs(r *ledger.Record) []any {
	finished := ns(r.FinishedAt)
	if r.State == ledger.InProgress {
		finished = 0
	}
	return []any{r.Identity, r.RequestID, r.Tenant, r.Operation, r.RequestSHA256, r.Stream, string(r.State),
		r.Owner, r.Generation, ns(r.LeaseUntil), ns(r.CreatedAt), finished}
}

// qClaim inserts a record and, only if it was new, its events, in one
// statement; it returns 1 if the record was created.
var qClaim = `WITH ins AS (
		INSERT INTO requests (` + recordCols + `) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,NULL)
		ON CONFLICT (identity) DO NOTHING RETURNING 1
	), ev AS (
		INSERT INTO events (request_id, seq, generation, type, at, data) ` + eventsFrom(13) + ` WHERE EXISTS (SELECT 1 FROM ins)
	) SELECT count(*) FROM ins`

// Claim creates the record and its first events, or returns the existing one.
func (s *Store) Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	args := append(recordArgs(rec), arrays(events).args()...)
	for {
		n, err := s.count(ctx, "0"+rec.Identity, qClaim, args...)
		if err != nil {
			return nil, false, fmt.Errorf("claim: %w", err)
		}
		if n == 1 {
			return nil, true, nil
		}
		existing, err := s.Get(ctx, rec.Identity)
		if errors.Is(err, ledger.ErrNotFound) {
			continue // released between the two statements: claim again
		}
		return existing, false, err
	}
}

// Replace swaps the identity's record for a new request.
func (s *Store) Replace(ctx context.Context, prev string, rec *ledger.Record, events []ledger.Event) (bool, error) {
	q := `WITH del AS (
			DELETE FROM requests WHERE identity = $1 AND request_id = $13 RETURNING 1
		), ins AS (
			INSERT INTO requests (` + recordCols + `) SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,NULL WHERE EXISTS (SELECT 1 FROM del)
		), ev AS (
			INSERT INTO events (request_id, seq, generation, type, at, data) ` + eventsFrom(14) + ` WHERE EXISTS (SELECT 1 FROM del)
		) SELECT count(*) FROM del`
	args := append(append(recordArgs(rec), prev), arrays(events).args()...)
	n, err := s.count(ctx, "0"+rec.Identity, q, args...)
	if err != nil {
		return false, fmt.Errorf("replace: %w", err)
	}
	return n == 1, nil
}

// fence reports why a fenced write to requestID at generation gen was
// refused: ErrStaleGeneration (another owner, or the identity moved on) or
// ErrFinished.
func (s *Store) fence(ctx context.Context, requestID string, gen int64) error {
	var cur int64
	var state string
	err := s.pool.QueryRow(ctx, `SELECT generation, state FROM requests WHERE request_id = $1`, requestID).Scan(&cur, &state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.ErrStaleGeneration
	case err != nil:
		return err
	case cur != gen:
		return ledger.ErrStaleGeneration
	case ledger.State(state) != ledger.InProgress:
		return ledger.ErrFinished
	}
	return ledger.ErrStaleGeneration // it moved on and back: still not ours
}

// keepStale records fenced-off writes as evidence.
func (s *Store) keepStale(ctx context.Context, evs []ledger.Event) {
	if len(evs) == 0 {
		return
	}
	a := arrays(evs)
	_, _ = s.pool.Exec(ctx, `INSERT INTO stale_events (request_id, generation, type, at, data)
		SELECT request_id, generation, type, at, data FROM (`+eventsFrom(1)+`) x`, a.args()...)
}

// refused works out why a fenced write changed nothing, keeps its events
// as evidence and returns the reason.
func (s *Store) refused(ctx context.Context, requestID string, gen int64, evs []ledger.Event) error {
	err := s.fence(ctx, requestID, gen)
	s.keepStale(ctx, evs)
	return err
}

// Append writes events fenced by their generation. The row lock (FOR
// SHARE) orders it against a concurrent takeover or finish: whichever
// commits first, the other sees its result.
func (s *Store) Append(ctx context.Context, _ bool, events ...ledger.Event) error {
	if len(events) == 0 {
		return nil
	}
	first := events[0]
	q := `WITH f AS (
			SELECT 1 FROM requests WHERE request_id = $7 AND generation = $8 AND state = 'in_progress' FOR SHARE
		), ins AS (
			INSERT INTO events (request_id, seq, generation, type, at, data) ` + eventsFrom(1) + ` WHERE EXISTS (SELECT 1 FROM f)
			RETURNING 1
		) SELECT count(*) FROM f`
	n, err := s.count(ctx, "1"+first.RequestID, q, append(arrays(events).args(), first.RequestID, first.Generation)...)
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if n == 0 {
		return s.refused(ctx, first.RequestID, first.Generation, events)
	}
	return nil
}

// finishStmt finishes (or releases) a request at its generation with its
// events, receipt and charge in one statement; it returns 1 if it did.
// lapsed (recovery) finishes it only if its lease lapsed before f.At.
func finishStmt(f *ledger.Finish, resp []byte, lapsed bool) (string, []any) {
	gen := f.Generation
	if f.Takeover {
		gen++
	}
	fence := `request_id = $7 AND generation = $8 AND state = 'in_progress'`
	if lapsed {
		fence += ` AND lease_until < $10`
	}
	change := `UPDATE requests SET state = $9, finished_at = $10, response = $11, generation = $12
		WHERE ` + fence + ` RETURNING 1`
	if f.Release {
		// $9…$12 are unused here, but typed so the statement parses.
		change = `DELETE FROM requests WHERE ` + fence + `
			AND (SELECT true FROM (SELECT $9::text, $10::bigint, $11::bytea, $12::bigint) unused) RETURNING 1`
	}
	var receipt []byte
	if f.Receipt != nil {
		receipt = f.Receipt
	}
	q := `WITH done AS (` + change + `
		), ev AS (
			INSERT INTO events (request_id, seq, generation, type, at, data) ` + eventsFrom(1) + ` WHERE EXISTS (SELECT 1 FROM done)
		), rc AS (
			INSERT INTO receipts (request_id, tenant, body) SELECT $7::text, $13::text, $14::bytea WHERE $14::bytea IS NOT NULL AND EXISTS (SELECT 1 FROM done)
			ON CONFLICT (request_id) DO UPDATE SET body = excluded.body
		), sp AS (
			INSERT INTO tenant_spend (day, tenant, shard, charged) SELECT $15::bigint, $13::text, $17::smallint, $16::bigint
			WHERE $16::bigint <> 0 AND EXISTS (SELECT 1 FROM done)
			ON CONFLICT (day, tenant, shard) DO UPDATE SET charged = tenant_spend.charged + excluded.charged
		), ks AS (
			INSERT INTO key_spend (day, key_id, shard, charged) SELECT $15::bigint, $18::text, $17::smallint, $16::bigint
			WHERE $16::bigint <> 0 AND $18::text <> '' AND EXISTS (SELECT 1 FROM done)
			ON CONFLICT (day, key_id, shard) DO UPDATE SET charged = key_spend.charged + excluded.charged
		), fa AS (` + factsFrom(`$7::text, $13::text`, 19) + ` AND $14::bytea IS NOT NULL AND EXISTS (SELECT 1 FROM done)
			` + factsConflict + `
		) SELECT count(*) FROM done`
	args := append(arrays(f.Events).args(), f.RequestID, f.Generation, string(f.State), ns(f.At), resp, gen,
		f.Tenant, receipt, ledger.Day(f.At), f.Charge, shardOf(f.RequestID), f.Key)
	return q, append(args, finishParams(f)...)
}

// factsFrom inserts a receipt's spend facts: its request id and tenant
// (SQL expressions), then the rest of factParams at $n…$n+10, if there
// are any (the statement goes on with more conditions).
func factsFrom(idTenant string, n int) string {
	return fmt.Sprintf(`INSERT INTO receipt_spend (`+ledger.SpendFactCols+`) SELECT %s, $%d::bigint, $%d::text, $%d::text, $%d::text,
			$%d::text, $%d::text, $%d::bigint, $%d::bigint, $%d::bigint, $%d::bigint, $%d::bigint WHERE $%d::bigint IS NOT NULL`,
		idTenant, n, n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8, n+9, n+10, n)
}

// factsConflict replaces the spend facts of an earlier copy of a receipt.
const factsConflict = `ON CONFLICT (request_id) DO UPDATE SET tenant = excluded.tenant, created_at = excluded.created_at,
	key_id = excluded.key_id, key_name = excluded.key_name, end_user = excluded.end_user, model = excluded.model, tags = excluded.tags,
	attempts = excluded.attempts, input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
	cost = excluded.cost, orphans = excluded.orphans`

// factParams are a receipt's spend facts after its request id and tenant
// (ledger.SpendFacts.Args), for factsFrom: all NULL if it has none.
// Derived on the caller's goroutine.
func factParams(tenant, requestID string, receipt []byte) []any {
	if receipt != nil {
		if f, ok := ledger.ReceiptFacts(tenant, requestID, receipt); ok {
			return f.Args()[2:]
		}
	}
	return make([]any, 11)
}

// finishParams are factParams of a finish's receipt: the facts its
// writer gave, else derived.
func finishParams(f *ledger.Finish) []any {
	if sf, ok := f.SpendFacts(); ok {
		return sf.Args()[2:]
	}
	return make([]any, 11)
}

// shardOf is the tenant_spend row a request's charge goes to.
func shardOf(requestID string) int16 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(requestID))
	return int16(h.Sum32() % spendShards)
}

// Finish commits a terminal with its response, events and receipt.
func (s *Store) Finish(ctx context.Context, f *ledger.Finish) error {
	var resp []byte
	if f.Response != nil {
		var err error
		if resp, err = ledger.EncodeResponse(f.Response); err != nil {
			return fmt.Errorf("encode the stored response of %s: %w", f.RequestID, err)
		}
	}
	q, args := finishStmt(f, resp, false)
	n, err := s.count(ctx, fmt.Sprintf("2%02d%s", shardOf(f.RequestID), f.RequestID), q, args...)
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if n == 0 {
		return s.refused(ctx, f.RequestID, f.Generation, f.Events)
	}
	return nil
}

// Settle finishes many requests in one transaction; a request another
// owner moved on, or whose owner renewed its lease, is skipped, its
// events and receipt with it.
func (s *Store) Settle(ctx context.Context, fs []*ledger.Finish) ([]string, error) {
	var settled []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		settled = settled[:0]
		for _, f := range fs {
			var resp []byte
			if f.Response != nil {
				var err error
				if resp, err = ledger.EncodeResponse(f.Response); err != nil {
					return err
				}
			}
			q, args := finishStmt(f, resp, true)
			var n int
			if err := tx.QueryRow(ctx, q, args...).Scan(&n); err != nil {
				return fmt.Errorf("settle %s: %w", f.RequestID, err)
			}
			if n == 1 {
				settled = append(settled, f.RequestID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return settled, nil
}

// PutReceipt stores a receipt, and charges it, unless one exists.
func (s *Store) PutReceipt(ctx context.Context, rc *ledger.StoredReceipt) error {
	_, err := s.pool.Exec(ctx, `WITH ins AS (
			INSERT INTO receipts (request_id, tenant, body) VALUES ($1, $2, $3) ON CONFLICT (request_id) DO NOTHING RETURNING 1
		), ks AS (
			INSERT INTO key_spend (day, key_id, shard, charged) SELECT $4::bigint, $7::text, $6::smallint, $5::bigint
			WHERE $5::bigint <> 0 AND $7::text <> '' AND EXISTS (SELECT 1 FROM ins)
			ON CONFLICT (day, key_id, shard) DO UPDATE SET charged = key_spend.charged + excluded.charged
		), fa AS (`+factsFrom(`$1::text, $2::text`, 8)+` AND EXISTS (SELECT 1 FROM ins)
			`+factsConflict+`
		) INSERT INTO tenant_spend (day, tenant, shard, charged) SELECT $4::bigint, $2::text, $6::smallint, $5::bigint
		WHERE $5::bigint <> 0 AND EXISTS (SELECT 1 FROM ins)
		ON CONFLICT (day, tenant, shard) DO UPDATE SET charged = tenant_spend.charged + excluded.charged`,
		append([]any{rc.RequestID, rc.Tenant, rc.Body, ledger.Day(rc.At), rc.Charge, shardOf(rc.RequestID), rc.Key},
			factParams(rc.Tenant, rc.RequestID, rc.Body)...)...)
	if err != nil {
		return fmt.Errorf("put receipt: %w", err)
	}
	return nil
}

// Takeover moves an in-progress request to owner with a new generation.
func (s *Store) Takeover(ctx context.Context, requestID, owner string, gen int64, leaseUntil time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE requests SET owner = $1, generation = $2 + 1, lease_until = $3
		WHERE request_id = $4 AND generation = $2 AND state = 'in_progress'`, owner, gen, ns(leaseUntil), requestID)
	if err != nil {
		return 0, fmt.Errorf("takeover: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, s.fence(ctx, requestID, gen)
	}
	return gen + 1, nil
}

// Renew extends owner's live leases of ids.
func (s *Store) Renew(ctx context.Context, owner string, ids []string, now, until time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `UPDATE requests SET lease_until = $1
		WHERE request_id = ANY($2) AND owner = $3 AND state = 'in_progress' AND lease_until >= $4 RETURNING request_id`,
		ns(until), ids, owner, ns(now))
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	held := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		held[id] = true
	}
	var lost []string
	for _, id := range ids {
		if !held[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// AddDedup adds to a receipt's dedup counts, under the receipt's row lock.
func (s *Store) AddDedup(ctx context.Context, tenant, requestID string, joined, replayed, clientRetries int) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var body []byte
		err := tx.QueryRow(ctx, `SELECT body FROM receipts WHERE request_id = $1 AND tenant = $2 FOR UPDATE`, requestID, tenant).Scan(&body)
		if errors.Is(err, pgx.ErrNoRows) {
			return ledger.ErrNotFound
		}
		if err != nil {
			return err
		}
		next, err := ledger.AddDedup(body, joined, replayed, clientRetries)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE receipts SET body = $1 WHERE request_id = $2`, next, requestID)
		return err
	})
}

// Secret returns the fingerprint secret, generating it once: every
// replica sharing the database gets the same, however many start at once.
// ON CONFLICT DO UPDATE waits for a concurrent insert of the row to
// commit and then returns that row as committed — a plain SELECT after
// DO NOTHING would not see it within its statement's snapshot (READ
// COMMITTED), and found nothing. The no-op update keeps the value.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	var secret []byte
	err := s.pool.QueryRow(ctx, `INSERT INTO meta (k, v) VALUES ('fingerprint_secret', $1)
		ON CONFLICT (k) DO UPDATE SET v = meta.v RETURNING v`, fresh).Scan(&secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	return secret, nil
}

// SaveState keeps a named value in the meta table.
func (s *Store) SaveState(ctx context.Context, name string, value []byte) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO meta (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v`,
		"state:"+name, value); err != nil {
		return fmt.Errorf("save state %s: %w", name, err)
	}
	return nil
}

// expireChunk bounds one expiry statement, so that deleting a day's
// records never holds locks for long.
const expireChunk = 5000

// Expire deletes records finished before cutoff.
func (s *Store) Expire(ctx context.Context, cutoff time.Time) (int, error) {
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM requests WHERE identity IN (
			SELECT identity FROM requests WHERE state <> 'in_progress' AND finished_at > 0 AND finished_at < $1 LIMIT $2)`,
			ns(cutoff), expireChunk)
		if err != nil {
			return total, fmt.Errorf("expire: %w", err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < expireChunk {
			return total, nil
		}
	}
}
