package ledgerbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/intentlog"
	"github.com/oncegate/oncegate/internal/ledger/ledgertest"
)

// LogStore is the write path of a ledger kept in an intent log, as
// measured: a request's claim and its finish are one record each,
// appended with the group commit of intentlog.Log, and what the writes
// must check — one creation per identity, the fence of a finish by its
// generation — is checked against an index of the records in memory (a
// ledger built on the log would rebuild it from the log when it opens).
// The records are encoded compactly, not as JSON. With a store behind,
// each write is handed to it once the log holds it, without waiting for
// it.
//
// It is safe for concurrent use.
type LogStore struct {
	log    *intentlog.Log
	shards [64]shard
	seed   maphash.Seed
	bufs   sync.Pool

	spendMu sync.Mutex
	spend   map[spendKey]int64

	// behind is the queryable store written behind the log (nil: none).
	// Its calls must return without waiting for a commit; a request's
	// writes reach it in order, from the goroutine that made them.
	behind ledgertest.Writer
}

// shard is a part of the index of records, by identity.
type shard struct {
	mu   sync.Mutex
	recs map[string]*entry
}

// entry is a record in the index. durable is closed once its claim is in
// the log (err says if that failed): a claim of the same identity meanwhile
// returns the record only once it is durable.
type entry struct {
	rec     ledger.Record
	durable chan struct{}
	err     error
}

type spendKey struct {
	day    int64
	tenant string
}

// NewLogStore writes to l and, once l holds each write, to behind
// (nil for none).
func NewLogStore(l *intentlog.Log, behind ledgertest.Writer) *LogStore {
	s := &LogStore{log: l, behind: behind, seed: maphash.MakeSeed(), spend: map[spendKey]int64{}}
	for i := range s.shards {
		s.shards[i].recs = map[string]*entry{}
	}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	return s
}

func (s *LogStore) shard(identity string) *shard {
	return &s.shards[maphash.String(s.seed, identity)%uint64(len(s.shards))]
}

// Claim creates rec unless its identity has a record.
func (s *LogStore) Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	sh := s.shard(rec.Identity)
	sh.mu.Lock()
	if e, ok := sh.recs[rec.Identity]; ok {
		sh.mu.Unlock()
		<-e.durable
		if e.err != nil {
			return nil, false, e.err
		}
		sh.mu.Lock()
		existing := e.rec
		sh.mu.Unlock()
		return &existing, false, nil
	}
	e := &entry{rec: *rec, durable: make(chan struct{})}
	e.rec.Response = nil
	sh.recs[rec.Identity] = e
	sh.mu.Unlock()

	if err := s.append(func(b []byte) []byte { return encodeClaim(b, rec, events) }); err != nil {
		sh.mu.Lock()
		delete(sh.recs, rec.Identity)
		sh.mu.Unlock()
		e.err = fmt.Errorf("claim %s: %w", rec.RequestID, err)
		close(e.durable)
		return nil, false, e.err
	}
	close(e.durable)
	if s.behind != nil {
		if _, _, err := s.behind.Claim(ctx, rec, events); err != nil {
			return nil, true, fmt.Errorf("claim %s behind the log: %w", rec.RequestID, err)
		}
	}
	return nil, true, nil
}

// append encodes a record into a pooled buffer and appends it to the log.
func (s *LogStore) append(encode func([]byte) []byte) error {
	bp := s.bufs.Get().(*[]byte)
	*bp = encode((*bp)[:0])
	err := s.log.Append(*bp)
	s.bufs.Put(bp)
	return err
}

// Finish commits a terminal, fenced by its generation.
func (s *LogStore) Finish(ctx context.Context, f *ledger.Finish) error {
	sh := s.shard(f.Identity)
	sh.mu.Lock()
	e, ok := sh.recs[f.Identity]
	switch {
	case !ok || e.rec.RequestID != f.RequestID || e.rec.Generation != f.Generation:
		sh.mu.Unlock()
		return ledger.ErrStaleGeneration
	case e.rec.State.Finished():
		sh.mu.Unlock()
		return ledger.ErrFinished
	}
	// Taken now, so that a second finish is refused; given back if the
	// append fails.
	e.rec.State = f.State
	sh.mu.Unlock()

	if err := s.append(func(b []byte) []byte { return encodeFinish(b, f) }); err != nil {
		sh.mu.Lock()
		e.rec.State = ledger.InProgress
		sh.mu.Unlock()
		return fmt.Errorf("finish %s: %w", f.RequestID, err)
	}
	sh.mu.Lock()
	e.rec.FinishedAt, e.rec.Response = f.At, f.Response
	sh.mu.Unlock()
	if f.Charge != 0 {
		s.spendMu.Lock()
		s.spend[spendKey{ledger.Day(f.At), f.Tenant}] += f.Charge
		s.spendMu.Unlock()
	}
	if s.behind != nil {
		if err := s.behind.Finish(ctx, f); err != nil {
			return fmt.Errorf("finish %s behind the log: %w", f.RequestID, err)
		}
	}
	return nil
}

// Drain waits for the store written behind, if it tells when it caught
// up (ledgertest.Drainer).
func (s *LogStore) Drain() error {
	if d, ok := s.behind.(ledgertest.Drainer); ok {
		return d.Drain()
	}
	return nil
}

// Close closes the log (not the store behind it).
func (s *LogStore) Close() error { return s.log.Close() }

// The records: a kind byte ('C' a claim, 'F' a finish), then the fields
// in order, strings and bytes as a uvarint length and the bytes, numbers
// as varints, events as a count and each event's fields.
const (
	kindClaim  = 'C'
	kindFinish = 'F'
)

func encodeClaim(b []byte, r *ledger.Record, evs []ledger.Event) []byte {
	b = append(b, kindClaim)
	for _, v := range []string{r.Identity, r.RequestID, r.Tenant, r.Operation, r.RequestSHA256, r.Owner} {
		b = appendString(b, v)
	}
	stream := int64(0)
	if r.Stream {
		stream = 1
	}
	for _, v := range []int64{stream, r.Generation, ledger.UnixNano(r.LeaseUntil), ledger.UnixNano(r.CreatedAt)} {
		b = binary.AppendVarint(b, v)
	}
	return appendEvents(b, evs)
}

func encodeFinish(b []byte, f *ledger.Finish) []byte {
	b = append(b, kindFinish)
	for _, v := range []string{f.Identity, f.RequestID, string(f.State), f.Tenant, f.Key} {
		b = appendString(b, v)
	}
	flags := int64(0)
	if f.Release {
		flags |= 1
	}
	if f.Takeover {
		flags |= 2
	}
	for _, v := range []int64{f.Generation, ledger.UnixNano(f.At), f.Charge, flags} {
		b = binary.AppendVarint(b, v)
	}
	if r := f.Response; r != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(r.Status))
		b = appendString(b, r.ContentType)
		b = appendString(b, r.Route)
		b = binary.AppendVarint(b, int64(r.Attempts))
		b = appendString(b, string(r.Body))
		truncated := byte(0)
		if r.Truncated {
			truncated = 1
		}
		b = append(b, truncated)
	} else {
		b = append(b, 0)
	}
	b = appendEvents(b, f.Events)
	return appendString(b, string(f.Receipt))
}

func appendEvents(b []byte, evs []ledger.Event) []byte {
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for _, e := range evs {
		b = binary.AppendVarint(b, e.Seq)
		b = binary.AppendVarint(b, e.Generation)
		b = appendString(b, string(e.Type))
		b = binary.AppendVarint(b, ledger.UnixNano(e.At))
		b = appendString(b, string(e.Data))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
