// Package memory is a ledger backend that keeps everything in the
// process's memory: nothing survives the process, so it serves tests,
// benchmarks and `store: memory://`, never a deployment that needs its
// receipts after a restart. It passes the same conformance suite as the
// durable backends, so the gateway has one storage path whichever backend
// it runs on. The histories (events and receipts) of the oldest finished
// requests are dropped past a bound, so a long run does not grow without
// limit; records go when the gateway expires them, and histories when it
// sweeps them, as in every backend.
package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// DefaultHistory is how many finished requests' histories New keeps.
const DefaultHistory = 100_000

// Store is the in-memory ledger. It is safe for concurrent use.
type Store struct {
	*data
	closed atomic.Bool
}

// data is what a Store holds; Reopen hands it to a new Store.
type data struct {
	maxHistory int

	mu       sync.Mutex
	records  map[string]*ledger.Record // by identity
	byID     map[string]string         // request id → identity, for live records
	events   map[string][]ledger.Event // by request id, in seq order
	stale    map[string][]ledger.Event
	receipts map[string]storedReceipt // by request id
	byTenant map[string][]string      // a tenant's receipt ids, sorted
	history  []string                 // request ids with a receipt, oldest first
	spend    map[int64]map[string]int64
	secret   []byte
	state    map[string][]byte
	turns    map[string]*ledger.Turn // by response id
	orphans  []*ledger.Orphan
	keys     map[string]*ledger.Key // by id
	keySpend map[int64]map[string]int64
	teams    map[string]*ledger.Tenant // by id
}

type storedReceipt struct {
	tenant string
	body   []byte
	// facts are the receipt's spend facts (nil: the body has none).
	facts *ledger.SpendFacts
}

// stored is a receipt with its spend facts: the finish's (fin: nil, or
// one without them, has them derived).
func stored(tenant, id string, body []byte, fin *ledger.Finish) storedReceipt {
	var f *ledger.SpendFacts
	if fin != nil {
		f, _ = fin.SpendFacts()
	} else {
		f, _ = ledger.ReceiptFacts(tenant, id, body)
	}
	return storedReceipt{tenant: tenant, body: slices.Clone(body), facts: f}
}

var _ ledger.Store = (*Store)(nil)

// New returns an empty store that keeps the histories of up to maxHistory
// finished requests (DefaultHistory if maxHistory ≤ 0).
func New(maxHistory int) *Store {
	if maxHistory <= 0 {
		maxHistory = DefaultHistory
	}
	return &Store{data: &data{maxHistory: maxHistory, records: map[string]*ledger.Record{}, byID: map[string]string{},
		events: map[string][]ledger.Event{}, stale: map[string][]ledger.Event{}, receipts: map[string]storedReceipt{},
		byTenant: map[string][]string{}, spend: map[int64]map[string]int64{}, state: map[string][]byte{},
		turns: map[string]*ledger.Turn{}, keys: map[string]*ledger.Key{}, keySpend: map[int64]map[string]int64{},
		teams: map[string]*ledger.Tenant{}}}
}

// Reopen returns a new store over what s holds, as if the process had
// restarted over storage that outlived it: for tests that restart a
// gateway. s stays closed.
func (s *Store) Reopen() *Store { return &Store{data: s.data} }

// errClosed answers every call after Close.
var errClosed = errors.New("ledger: closed")

// lock takes the store's lock, or fails once it is closed.
func (s *Store) lock() error {
	if s.closed.Load() {
		return errClosed
	}
	s.mu.Lock()
	return nil
}

// copyRecord returns a copy a caller may change without touching the store.
func copyRecord(r *ledger.Record) *ledger.Record {
	c := *r
	if r.Response != nil {
		resp := *r.Response
		c.Response = &resp
	}
	return &c
}

// Claim creates the record and its first events, or returns the existing one.
func (s *Store) Claim(_ context.Context, rec *ledger.Record, events []ledger.Event) (*ledger.Record, bool, error) {
	if err := s.lock(); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	if r, ok := s.records[rec.Identity]; ok {
		return copyRecord(r), false, nil
	}
	if err := s.checkSeqs(events); err != nil {
		return nil, false, err
	}
	s.insert(rec, events)
	return nil, true, nil
}

func (s *Store) insert(rec *ledger.Record, events []ledger.Event) {
	s.records[rec.Identity] = copyRecord(rec)
	s.byID[rec.RequestID] = rec.Identity
	s.addEvents(events)
}

// checkSeqs refuses events whose sequence numbers a request already has.
func (s *Store) checkSeqs(events []ledger.Event) error {
	for _, e := range events {
		for _, x := range s.events[e.RequestID] {
			if x.Seq == e.Seq {
				return fmt.Errorf("event %d of %s exists", e.Seq, e.RequestID)
			}
		}
	}
	return nil
}

func (s *Store) addEvents(events []ledger.Event) {
	for _, e := range events {
		e.Data = slices.Clone(e.Data)
		evs := append(s.events[e.RequestID], e)
		slices.SortStableFunc(evs, func(a, b ledger.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		s.events[e.RequestID] = evs
	}
}

// Replace swaps the identity's record for a new request.
func (s *Store) Replace(_ context.Context, prev string, rec *ledger.Record, events []ledger.Event) (bool, error) {
	if err := s.lock(); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r, ok := s.records[rec.Identity]
	if !ok || r.RequestID != prev {
		return false, nil
	}
	if err := s.checkSeqs(events); err != nil {
		return false, err
	}
	delete(s.byID, prev)
	s.insert(rec, events)
	return true, nil
}

// live returns requestID's record, fenced: it must still be at generation
// gen and in progress.
func (s *Store) live(requestID string, gen int64) (*ledger.Record, error) {
	r, ok := s.records[s.byID[requestID]]
	switch {
	case !ok || r.RequestID != requestID:
		return nil, ledger.ErrStaleGeneration // the identity moved on
	case r.Generation != gen:
		return nil, ledger.ErrStaleGeneration
	case r.State != ledger.InProgress:
		return nil, ledger.ErrFinished
	}
	return r, nil
}

// Append writes events fenced by their generation.
func (s *Store) Append(_ context.Context, _ bool, events ...ledger.Event) error {
	if len(events) == 0 {
		return nil
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, err := s.live(events[0].RequestID, events[0].Generation); err != nil {
		s.keepStale(events)
		return err
	}
	if err := s.checkSeqs(events); err != nil {
		return err
	}
	s.addEvents(events)
	return nil
}

func (s *Store) keepStale(events []ledger.Event) {
	for _, e := range events {
		e.Type, e.Data = ledger.EvStale, slices.Clone(e.Data)
		s.stale[e.RequestID] = append(s.stale[e.RequestID], e)
	}
}

// Finish commits a terminal with its response, events and receipt.
func (s *Store) Finish(_ context.Context, f *ledger.Finish) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.finish(f)
}

func (s *Store) finish(f *ledger.Finish) error {
	r, err := s.live(f.RequestID, f.Generation)
	if err != nil {
		s.keepStale(f.Events)
		return err
	}
	if err := s.checkSeqs(f.Events); err != nil {
		return err
	}
	if f.Release {
		delete(s.records, r.Identity)
		delete(s.byID, r.RequestID)
	} else {
		r.State, r.FinishedAt = f.State, f.At.UTC()
		if f.Response != nil {
			resp := *f.Response
			resp.Body = slices.Clone(resp.Body)
			r.Response = &resp
		}
		if f.Takeover {
			r.Generation++
		}
	}
	s.addEvents(f.Events)
	if f.Receipt != nil {
		s.putReceipt(f.Tenant, f.RequestID, f.Receipt, f, true)
	}
	s.charge(f.Tenant, f.Charge, f.At)
	s.chargeKey(f.Key, f.Charge, f.At)
	return nil
}

func (s *Store) charge(tenant string, nanoUSD int64, at time.Time) {
	if nanoUSD == 0 {
		return
	}
	day := ledger.Day(at)
	if s.spend[day] == nil {
		s.spend[day] = map[string]int64{}
	}
	s.spend[day][tenant] += nanoUSD
}

// putReceipt stores a receipt (replacing one if replace), with the
// spend facts of the finish that wrote it (nil: derived), and reports
// whether it was new.
func (s *Store) putReceipt(tenant, id string, body []byte, f *ledger.Finish, replace bool) bool {
	if _, ok := s.receipts[id]; ok {
		if replace {
			s.receipts[id] = stored(tenant, id, body, f)
		}
		return false
	}
	s.receipts[id] = stored(tenant, id, body, f)
	ids := s.byTenant[tenant]
	i, _ := slices.BinarySearch(ids, id)
	s.byTenant[tenant] = slices.Insert(ids, i, id)
	s.history = append(s.history, id)
	for len(s.history) > s.maxHistory {
		s.forget(s.history[0])
		s.history = s.history[1:]
	}
	return true
}

// forget drops a finished request's history: its receipt and events.
func (s *Store) forget(id string) {
	if !s.dropReceipt(id) {
		return
	}
	if _, live := s.byID[id]; !live || s.records[s.byID[id]].State != ledger.InProgress {
		delete(s.events, id)
		delete(s.stale, id)
	}
}

// Get returns the record for identity.
func (s *Store) Get(_ context.Context, identity string) (*ledger.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	r, ok := s.records[identity]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return copyRecord(r), nil
}

// Takeover moves an in-progress request to owner with a new generation.
func (s *Store) Takeover(_ context.Context, requestID, owner string, gen int64, leaseUntil time.Time) (int64, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	r, err := s.live(requestID, gen)
	if err != nil {
		return 0, err
	}
	r.Owner, r.Generation, r.LeaseUntil = owner, gen+1, leaseUntil.UTC()
	return r.Generation, nil
}

// Settle finishes many requests at once; fenced-off ones, and those whose
// lease is live, are skipped.
func (s *Store) Settle(_ context.Context, fs []*ledger.Finish) ([]string, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var settled []string
	for _, f := range fs {
		if r, err := s.live(f.RequestID, f.Generation); err != nil || r == nil || !r.LeaseUntil.Before(f.At) {
			continue
		}
		if err := s.finish(f); err != nil {
			return nil, err
		}
		settled = append(settled, f.RequestID)
	}
	return settled, nil
}

// Lapsed lists in-progress records whose lease lapsed before at.
func (s *Store) Lapsed(ctx context.Context, at time.Time) ([]ledger.Unfinished, error) {
	all, err := s.Unfinished(ctx)
	return slices.DeleteFunc(all, func(u ledger.Unfinished) bool { return !u.Record.LeaseUntil.Before(at) }), err
}

// PutReceipt stores a receipt unless one exists.
func (s *Store) PutReceipt(_ context.Context, rc *ledger.StoredReceipt) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.putReceipt(rc.Tenant, rc.RequestID, rc.Body, nil, false) {
		s.charge(rc.Tenant, rc.Charge, rc.At)
		s.chargeKey(rc.Key, rc.Charge, rc.At)
	}
	return nil
}

// Renew extends owner's leases of ids that it still holds.
func (s *Store) Renew(_ context.Context, owner string, ids []string, now, until time.Time) ([]string, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var lost []string
	for _, id := range ids {
		r, ok := s.records[s.byID[id]]
		if !ok || r.RequestID != id || r.State != ledger.InProgress || r.Owner != owner || r.LeaseUntil.Before(now) {
			lost = append(lost, id)
			continue
		}
		r.LeaseUntil = until.UTC()
	}
	return lost, nil
}

// Unfinished lists every in-progress record with its events.
func (s *Store) Unfinished(_ context.Context) ([]ledger.Unfinished, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []ledger.Unfinished
	for _, r := range s.records {
		if r.State == ledger.InProgress {
			out = append(out, ledger.Unfinished{Record: copyRecord(r), Events: slices.Clone(s.events[r.RequestID])})
		}
	}
	slices.SortFunc(out, func(a, b ledger.Unfinished) int { return cmp.Compare(a.Record.RequestID, b.Record.RequestID) })
	return out, nil
}

// Events returns a request's events in order.
func (s *Store) Events(_ context.Context, requestID string) ([]ledger.Event, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return slices.Clone(s.events[requestID]), nil
}

// StaleEvents returns the writes fenced off for a request (evidence).
func (s *Store) StaleEvents(_ context.Context, requestID string) ([]ledger.Event, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return slices.Clone(s.stale[requestID]), nil
}

// Receipt returns a tenant's receipt.
func (s *Store) Receipt(_ context.Context, tenant, requestID string) ([]byte, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	rc, ok := s.receipts[requestID]
	if !ok || rc.tenant != tenant {
		return nil, ledger.ErrNotFound
	}
	return slices.Clone(rc.body), nil
}

// Receipts lists a tenant's receipts newest first, older than `after`.
func (s *Store) Receipts(_ context.Context, tenant string, limit int, after string) ([][]byte, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.byTenant[tenant]
	i := len(ids) - 1
	if after != "" {
		j, _ := slices.BinarySearch(ids, after)
		i = j - 1
	}
	var out [][]byte
	for ; i >= 0 && len(out) < limit; i-- {
		out = append(out, slices.Clone(s.receipts[ids[i]].body))
	}
	return out, nil
}

// AddDedup adds to a receipt's dedup counts.
func (s *Store) AddDedup(_ context.Context, tenant, requestID string, joined, replayed, clientRetries int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rc, ok := s.receipts[requestID]
	if !ok || rc.tenant != tenant {
		return ledger.ErrNotFound
	}
	next, err := ledger.AddDedup(rc.body, joined, replayed, clientRetries)
	if err != nil {
		return err
	}
	rc.body = next
	s.receipts[requestID] = rc
	return nil
}

// Spend returns each tenant's charges on day.
func (s *Store) Spend(_ context.Context, day int64) (map[string]int64, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := map[string]int64{}
	for t, v := range s.spend[day] {
		out[t] = v
	}
	return out, nil
}

// TenantSpend sums each tenant's charges over the days [fromDay, toDay].
func (s *Store) TenantSpend(_ context.Context, fromDay, toDay int64) (map[string]int64, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := map[string]int64{}
	for d, m := range s.spend {
		if d < fromDay || d > toDay {
			continue
		}
		for t, v := range m {
			out[t] += v
		}
	}
	return out, nil
}

// Secret returns the fingerprint secret, generating it once.
func (s *Store) Secret(context.Context) ([]byte, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.secret == nil {
		s.secret = make([]byte, 32)
		if _, err := rand.Read(s.secret); err != nil {
			return nil, err
		}
	}
	return slices.Clone(s.secret), nil
}

// SaveState keeps a named value.
func (s *Store) SaveState(_ context.Context, name string, value []byte) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.state[name] = slices.Clone(value)
	return nil
}

// State returns a named value.
func (s *Store) State(_ context.Context, name string) ([]byte, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	v, ok := s.state[name]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return slices.Clone(v), nil
}

// Expire deletes records finished before cutoff.
func (s *Store) Expire(_ context.Context, cutoff time.Time) (int, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for id, r := range s.records {
		if r.State != ledger.InProgress && !r.FinishedAt.IsZero() && r.FinishedAt.Before(cutoff) {
			delete(s.records, id)
			delete(s.byID, r.RequestID)
			n++
		}
	}
	return n, nil
}

// Ping reports whether the store is open.
func (s *Store) Ping(context.Context) error {
	if err := s.lock(); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Close releases the store; every later call fails.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
