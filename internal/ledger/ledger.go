// Package ledger is the idempotency ledger and durable event log
// (docs/identity.md): one record per logical request identity (an
// idempotency key's digest
// or a keyless fingerprint) with its state, owner lease and fencing
// generation; the append-only event log of every request; the stored
// response that replays serve; and receipts. Backends live in
// subpackages; ledgertest is the conformance suite every backend passes.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// State is a ledger record's state (docs/identity.md).
type State string

// The record states.
const (
	InProgress     State = "in_progress"
	Succeeded      State = "succeeded"
	FailedNoEffect State = "failed_no_effect"
	Indeterminate  State = "indeterminate"
)

// Finished reports whether s is a terminal state.
func (s State) Finished() bool { return s != InProgress }

// Record is one logical request identity's entry.
type Record struct {
	// Identity is "k:" + key_sha256 for a keyed request, "t:" + response
	// id + "#" + try for a conversation turn's try, "u:" + the
	// request id for a keyless one that joins nothing, "f:" +
	// fingerprint for a keyless one. Never the raw key.
	Identity      string
	RequestID     string
	Tenant        string
	Operation     string
	RequestSHA256 string
	Stream        bool
	State         State
	// Owner is the gateway process that holds the lease; Generation
	// fences its writes; LeaseUntil is when the lease lapses unless renewed.
	Owner      string
	Generation int64
	LeaseUntil time.Time
	CreatedAt  time.Time
	FinishedAt time.Time // zero while in progress
	// Response is what replays send (set when finished).
	Response *Response
}

// Keyed reports whether the record was named by an Idempotency-Key, or
// is a try of a conversation turn ("t:" + response id + "#" + try),
// which its turn names as a key does.
func (r *Record) Keyed() bool {
	return len(r.Identity) > 2 && (r.Identity[:2] == "k:" || r.Identity[:2] == "t:")
}

// Response is a stored answer: the status, the headers a replay repeats and
// the body as the client received it (for a stream, the SSE bytes).
type Response struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Route       string `json:"route,omitempty"`
	Attempts    int    `json:"attempts"`
	Body        []byte `json:"body"`
	// Truncated: a stream longer than the buffer bound; it cannot replay.
	Truncated bool `json:"truncated,omitempty"`
	// Encoded, when set, is the response as EncodeResponse writes it,
	// which a store then keeps as it is (Body is its tail): the gateway
	// writes the header in front of an answer's bytes rather than copy
	// them. Nil: a store encodes the response itself.
	Encoded []byte `json:"-"`
}

// EventType names an event of the durable log (docs/identity.md).
type EventType string

// The event types, in the order one attempt produces them.
const (
	EvCreated  EventType = "logical_request_created"
	EvReserved EventType = "attempt_reserved"
	EvDispatch EventType = "attempt_dispatched"
	EvObserved EventType = "attempt_observed"
	EvDecision EventType = "retry_decision_committed"
	EvTerminal EventType = "terminal_committed"
	// EvStale records a write from an owner whose generation was fenced
	// off: kept as evidence, never applied.
	EvStale EventType = "stale_owner_write"
)

// Event is one entry of a logical request's log. Seq orders a request's
// events strictly from 1.
type Event struct {
	RequestID  string
	Seq        int64
	Generation int64
	Type       EventType
	At         time.Time
	// Data is the event's JSON payload (the attempt, the decision …).
	Data []byte
}

// Finish ends a logical request: its terminal state, the stored response
// and the receipt, written with the terminal_committed event in one commit.
type Finish struct {
	Identity   string
	RequestID  string
	Generation int64
	State      State
	Response   *Response
	At         time.Time
	Events     []Event // the remaining events, terminal_committed last
	Receipt    []byte  // receipt JSON
	// Facts, when not nil, are Receipt's spend facts as its writer knows
	// them (its RequestID and Tenant are the Finish's): the store keeps
	// them beside it without decoding it. They must be ReceiptFacts of
	// Receipt; nil has the store derive them.
	Facts  *SpendFacts
	Tenant string
	// Charge is what the request cost its tenant, in nano-USD: added to
	// the tenant's spend for the UTC day of At in the same commit, so the
	// day's spend survives a restart (see Spend).
	Charge int64
	// Key is the virtual key the request used ("" for none): the charge
	// is added to its spend too (see KeySpend).
	Key string
	// Release deletes the record instead of finishing it (the caller gave
	// up before any answer: the key may be used again); the events and the
	// receipt stay.
	Release bool
	// Takeover bumps the generation as it finishes (recovery settling
	// another owner's request).
	Takeover bool
}

// StoredReceipt is a receipt stored on its own (one rebuilt after
// recovery), with what it charges its tenant on the UTC day of At.
type StoredReceipt struct {
	Tenant    string
	RequestID string
	Body      []byte
	Charge    int64 // nano-USD
	At        time.Time
	Key       string // the virtual key charged too ("" for none)
}

// Errors the store returns.
var (
	// ErrStaleGeneration: the write's generation is no longer the
	// record's; a newer owner (or recovery) took over.
	ErrStaleGeneration = errors.New("ledger: stale generation")
	// ErrNotFound: no record (or receipt) for that identity or id.
	ErrNotFound = errors.New("ledger: not found")
	// ErrFinished: the record already has a terminal state.
	ErrFinished = errors.New("ledger: already finished")
	// ErrReadOnly: the store was opened to read, and this call writes.
	ErrReadOnly = errors.New("ledger: opened read-only")
)

// Store is a ledger backend. Implementations are safe for concurrent use.
// Leases are compared with the times callers pass, so the gateways that
// share a store need clocks that agree to well within a lease.
type Store interface {
	TurnStore
	KeyStore
	TenantStore
	SpendStore
	// Claim creates rec (state in_progress, generation 1) with its first
	// events in one durable commit, unless a record for rec.Identity
	// exists: then it returns that record and created false, writing
	// nothing.
	Claim(ctx context.Context, rec *Record, events []Event) (existing *Record, created bool, err error)
	// Replace swaps the record for rec.Identity for a new logical request,
	// if it still belongs to request prevRequestID (an expired key, or a
	// keyless twin past its replay window); false if it changed meanwhile.
	Replace(ctx context.Context, prevRequestID string, rec *Record, events []Event) (bool, error)
	// Append writes events for a request, fenced by their generation.
	// With wait, it returns once they are durable (ErrStaleGeneration if
	// fenced off); without, it queues them for the next commit.
	Append(ctx context.Context, wait bool, events ...Event) error
	// Finish commits a terminal (fenced: ErrStaleGeneration, ErrFinished;
	// a fenced write's events are kept as stale_owner_write evidence).
	Finish(ctx context.Context, f *Finish) error
	// Get returns the record for identity, or ErrNotFound.
	Get(ctx context.Context, identity string) (*Record, error)
	// Takeover makes owner the holder of an in-progress request whose
	// generation is still gen, bumping the generation so the previous
	// owner's late writes are fenced off. It returns the new generation,
	// or ErrStaleGeneration / ErrFinished if the record moved on.
	Takeover(ctx context.Context, requestID, owner string, gen int64, leaseUntil time.Time) (int64, error)
	// Settle finishes many requests in one commit (recovery settling
	// requests whose owners are gone). A request is settled only while it
	// is in progress at its Finish's Generation and its lease lapsed
	// before the Finish's At: one another owner moved on, or whose owner
	// renewed its lease meanwhile, is skipped with its events, receipt
	// and charge. It returns the request ids it settled.
	Settle(ctx context.Context, fs []*Finish) ([]string, error)
	// Lapsed lists every in-progress record whose owner's lease lapsed
	// before at, with its events: what recovery settles (docs/identity.md,
	// "Recovery"; docs/replicas.md). A request whose lease is live is
	// never listed: its owner may be another gateway that is running.
	Lapsed(ctx context.Context, at time.Time) ([]Unfinished, error)
	// PutReceipt stores a receipt, and adds its charge to the tenant's
	// spend, unless a receipt for that request exists.
	PutReceipt(ctx context.Context, r *StoredReceipt) error
	// Renew extends to until the leases of owner's in-progress requests
	// ids. A lease that lapsed before now is not renewed — its owner lost
	// it, and recovery may already have settled it — nor is one another
	// owner holds or one that finished; lost lists those of ids that were
	// in progress and are not (or no longer) owner's to hold.
	Renew(ctx context.Context, owner string, ids []string, now, until time.Time) (lost []string, err error)
	// Unfinished lists every in-progress record with its events.
	Unfinished(ctx context.Context) ([]Unfinished, error)
	// Events returns a request's events in order.
	Events(ctx context.Context, requestID string) ([]Event, error)
	// Receipt returns a tenant's receipt JSON, or ErrNotFound.
	Receipt(ctx context.Context, tenant, requestID string) ([]byte, error)
	// Receipts lists a tenant's receipts newest first (by request id,
	// which is time-ordered), at most limit, continuing after the request
	// id `after` ("" from the newest).
	Receipts(ctx context.Context, tenant string, limit int, after string) ([][]byte, error)
	// AddDedup adds to a stored receipt's "dedup" counts (joined and
	// replayed arrivals) and raises its client_retry_count to at least
	// clientRetries, atomically.
	AddDedup(ctx context.Context, tenant, requestID string, joined, replayed, clientRetries int) error
	// Spend returns what each tenant was charged on a UTC day (days since
	// the Unix epoch, see Day), in nano-USD: the charges of the receipts
	// stored that day.
	Spend(ctx context.Context, day int64) (map[string]int64, error)
	// TenantSpend returns what each tenant was charged over the UTC days
	// [fromDay, toDay], in nano-USD: a month's or (from FirstDay) a
	// lifetime's spend. Like Spend it is never swept.
	TenantSpend(ctx context.Context, fromDay, toDay int64) (map[string]int64, error)
	// Secret returns the gateway's fingerprint secret, creating it once.
	Secret(ctx context.Context) ([]byte, error)
	// SaveState keeps a small named value a gateway wants back after a
	// restart (the tenants' request-rate buckets), replacing the last.
	SaveState(ctx context.Context, name string, value []byte) error
	// State returns what SaveState last kept under name, or ErrNotFound.
	State(ctx context.Context, name string) ([]byte, error)
	// Expire deletes finished records that finished before cutoff (their
	// events and receipts stay); it returns how many.
	Expire(ctx context.Context, cutoff time.Time) (int, error)
	// Sweep deletes the histories of requests created before cutoff
	// that have no record any more, and returns how many. A request's
	// history is what the store keeps of it besides its record: its
	// events, its receipt and the writes fenced off from it
	// (stale_owner_write evidence), deleted together in one commit —
	// never a receipt without the events it could be rebuilt from. Its
	// creation time is the time of its first event (seq 1,
	// logical_request_created), its receipt's created_at; a history
	// without that event has no age and is never swept. A request that
	// still has a record (in progress, or finished within its
	// idempotency retention: a replay may still be answered from it and
	// counted in its receipt) is never touched. Spend (Spend, KeySpend)
	// is counted apart and never swept: deleting receipts frees no day's
	// or month's budget. Sweep works in bounded batches, each its own
	// commit, so that other writes never wait on it for long, and stops
	// between batches when ctx ends (returning ctx's error).
	Sweep(ctx context.Context, cutoff time.Time) (int, error)
	// ReceiptsBefore lists the receipts of requests created before
	// `before` (as Sweep dates them: a request without a creation event
	// is not listed), oldest first (by creation, then request id), at
	// most limit, continuing after `after` (nil: from the oldest): every
	// receipt a Sweep at that cutoff would delete, and those it would
	// keep because their requests still have records.
	ReceiptsBefore(ctx context.Context, before time.Time, after *DatedReceipt, limit int) ([]DatedReceipt, error)
	// Ping reports whether the store can be written now: it commits a
	// heartbeat, so a store that answers reads but cannot commit (a full
	// disk) fails it.
	Ping(ctx context.Context) error
	// Close flushes pending writes and releases the store.
	Close() error
}

// DatedReceipt is a receipt with its request's id, tenant and creation
// time, as ReceiptsBefore lists it.
type DatedReceipt struct {
	RequestID string
	Tenant    string
	Created   time.Time
	Body      []byte
}

// SweepBatch is how many requests' histories one commit of a Sweep
// deletes at most: about a megabyte of rows; in SQLite about 8 ms of the
// writer's time, its commit's sync included (16 ms at worst, measured on
// a loaded two-core machine).
const SweepBatch = 256

// Listed reports whether ReceiptsBefore listed the receipt of a request
// created at created with id requestID at or before d (nil: none).
func (d *DatedReceipt) Listed(created time.Time, requestID string) bool {
	if d == nil {
		return false
	}
	return created.Before(d.Created) || created.Equal(d.Created) && requestID <= d.RequestID
}

// Day is t's UTC day: days since the Unix epoch, rounded down.
func Day(t time.Time) int64 { return gw.Day(t) }

// Unfinished is a record recovery must settle, with its events.
type Unfinished struct {
	Record *Record
	Events []Event
}

// WithEvents pairs in-progress records with their events (in order, of
// any number of requests): what backends return from Unfinished. Events
// of requests not among records are dropped.
func WithEvents(records []*Record, events []Event) []Unfinished {
	out := make([]Unfinished, len(records))
	index := make(map[string]int, len(records))
	for i, r := range records {
		out[i].Record = r
		index[r.RequestID] = i
	}
	for _, e := range events {
		if i, ok := index[e.RequestID]; ok {
			out[i].Events = append(out[i].Events, e)
		}
	}
	return out
}

// AddDedup adds to the "dedup" counts of a receipt's JSON and raises its
// client_retry_count, leaving every other field as it is. Backends use it
// to update stored receipts.
func AddDedup(receipt []byte, joined, replayed, clientRetries int) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(receipt, &top); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	var d struct {
		Joined   int `json:"joined"`
		Replayed int `json:"replayed"`
	}
	if raw, ok := top["dedup"]; ok {
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("receipt dedup: %w", err)
		}
	}
	d.Joined += joined
	d.Replayed += replayed
	top["dedup"], _ = json.Marshal(d)
	var retries int
	_ = json.Unmarshal(top["client_retry_count"], &retries)
	top["client_retry_count"], _ = json.Marshal(max(retries, clientRetries))
	return json.Marshal(top)
}

// InFlight reports whether a request's events show an attempt dispatched
// and never observed: one whose outcome is unknown, so the request cannot
// be retried blind (docs/identity.md).
func InFlight(evs []Event) bool {
	d, o := 0, 0
	for _, e := range evs {
		switch e.Type {
		case EvDispatch:
			d++
		case EvObserved:
			o++
		}
	}
	return d > o
}

// UnixNano is how the backends store a time: Unix nanoseconds, 0 for
// none.
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNano reads a time UnixNano stored.
func FromUnixNano(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}
