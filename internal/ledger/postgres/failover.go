package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A primary switch (docs/replicas.md). A URL may list several servers,
// postgres://h1:5432,h2:5432/db?target_session_attrs=read-write: a new
// connection goes to the first that takes writes. The connections the
// pool holds do not move by themselves when the primary goes: each is
// found dead only when a request uses it, and a pool of many would fail
// that many requests, one after another, after the standby took over.
// lossWatch sees every statement's outcome; when one says the server is
// gone, or no longer takes writes, it resets the pool: every idle
// connection is closed at once, every busy one when it is released, and
// the next request connects afresh — to whichever server takes writes
// now, or, while none does, it fails at once (503 store_unavailable).
type lossWatch struct {
	pool   atomic.Pointer[pgxpool.Pool]
	resets atomic.Int64
}

// watchLosses makes w see the statements of the connections cfg makes;
// attach gives it their pool.
func watchLosses(cfg *pgxpool.Config) *lossWatch {
	w := &lossWatch{}
	cfg.ConnConfig.Tracer = w
	return w
}

func (w *lossWatch) attach(p *pgxpool.Pool) { w.pool.Store(p) }

// saw resets the pool if err says the server is lost to this connection:
// the connection died (not because the caller gave up), the server is
// shutting down or starting, or it no longer takes writes (it is a
// standby now; its connections would never write again).
func (w *lossWatch) saw(ctx context.Context, conn *pgx.Conn, err error) {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var pe *pgconn.PgError
	lost := conn != nil && conn.IsClosed()
	if errors.As(err, &pe) {
		lost = lost || pe.Code == "25006" || strings.HasPrefix(pe.Code, "57P") // read_only_sql_transaction; admin or crash shutdown, cannot connect now
	}
	if p := w.pool.Load(); lost && p != nil {
		w.resets.Add(1)
		p.Reset()
	}
}

func (w *lossWatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (w *lossWatch) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	w.saw(ctx, conn, data.Err)
}

func (w *lossWatch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (w *lossWatch) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (w *lossWatch) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	w.saw(ctx, conn, data.Err)
}

var (
	_ pgx.QueryTracer = (*lossWatch)(nil)
	_ pgx.BatchTracer = (*lossWatch)(nil)
)
