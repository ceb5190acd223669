package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit. The hot writes — claims, appends, finishes — are single
// statements that answer with a count. Under load, many wait at once;
// sending each on a connection of its own makes a transaction, a round
// trip and a wait for the WAL to be flushed per write, and the backends'
// context switches cost as much as the statements. Instead a few writer
// goroutines take whatever writes are queued and send them as one batch:
// one round trip, one implicit transaction, one commit. A writer never
// waits for a batch to fill, so a lone request is sent at once, alone.
//
// Batches of different gateways (or of a gateway and a statement sent on
// its own) can wait on each other's rows: two finishes of one tenant's
// day share its spend rows, two claims of one identity its index entry.
// Each batch therefore takes its rows in one global order — claims by
// identity, then appends, then finishes by spend row — so that no two
// can wait on each other in a circle (PostgreSQL would break the
// deadlock, but only after deadlock_timeout, a second by default). For
// the same reason one writer sends a gateway's batches.
//
// A batch is atomic: if one of its statements fails (a duplicate event, a
// deadlock with another batch), nothing of it was committed, and each of
// its writes is sent again on its own, so that one bad write never takes
// another's with it.

// writers is how many batches of this gateway may be in flight at once.
const writers = 1

// maxBatch bounds one batch.
const maxBatch = 64

// countOp is one queued write: a statement that answers with a count.
type countOp struct {
	order string // where the write goes in a batch (see above)
	sql   string
	args  []any
	n     int
	err   error
	done  chan struct{}
}

// batcher sends queued writes in batches.
type batcher struct {
	pool  *pgxpool.Pool
	queue chan *countOp
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// failed counts batches that failed and were sent again one by one.
	failed atomic.Int64
}

func newBatcher(pool *pgxpool.Pool) *batcher {
	b := &batcher{pool: pool, queue: make(chan *countOp, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	ended := make(chan struct{}, writers)
	for range writers {
		go func() { b.run(); ended <- struct{}{} }()
	}
	go func() {
		for range writers {
			<-ended
		}
		close(b.done)
	}()
	return b
}

// count runs a counting statement through the batcher and waits for it.
// Once queued, it is waited for even if ctx ends, so that a caller never
// mistakes a committed write for a lost one.
func (b *batcher) count(ctx context.Context, order, sql string, args ...any) (int, error) {
	op := &countOp{order: order, sql: sql, args: args, done: make(chan struct{})}
	select {
	case b.queue <- op:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-b.stop:
		return 0, errClosed
	}
	<-op.done
	return op.n, op.err
}

var errClosed = errors.New("ledger: closed")

func (b *batcher) close() {
	b.once.Do(func() { close(b.stop) })
	<-b.done
}

func (b *batcher) run() {
	ops := make([]*countOp, 0, maxBatch)
	for {
		select {
		case op := <-b.queue:
			ops = append(ops[:0], op)
		case <-b.stop:
			return
		}
	gather:
		for len(ops) < maxBatch {
			select {
			case op := <-b.queue:
				ops = append(ops, op)
			default:
				break gather
			}
		}
		b.send(ops)
		for _, op := range ops {
			close(op.done)
		}
		clear(ops)
	}
}

// send runs ops as one batch, or one by one if the batch failed.
func (b *batcher) send(ops []*countOp) {
	ctx := context.Background()
	if len(ops) == 1 {
		ops[0].n, ops[0].err = b.one(ctx, ops[0])
		return
	}
	slices.SortStableFunc(ops, func(a, b *countOp) int { return strings.Compare(a.order, b.order) })
	batch := &pgx.Batch{}
	for _, op := range ops {
		batch.Queue(op.sql, op.args...)
	}
	err := func() error {
		br := b.pool.SendBatch(ctx, batch)
		defer br.Close()
		for _, op := range ops {
			if err := br.QueryRow().Scan(&op.n); err != nil {
				return err
			}
		}
		return br.Close()
	}()
	if err == nil {
		return
	}
	b.failed.Add(1)
	for _, op := range ops { // nothing was committed: each on its own
		op.n, op.err = b.one(ctx, op)
	}
}

func (b *batcher) one(ctx context.Context, op *countOp) (int, error) {
	var n int
	if err := b.pool.QueryRow(ctx, op.sql, op.args...).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}
