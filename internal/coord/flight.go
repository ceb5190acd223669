// Package coord coordinates logical requests in flight (docs/identity.md, docs/streaming.md):
// one Flight per identity, whose output — response head, then body bytes
// as the client protocol encodes them — is shared by its owner and every
// joiner. A joiner of a stream reads every byte from the start, then tails.
// A subscriber leaving never disturbs the others; the flight's work is
// cancelled only when none remains (after an optional grace, so that a
// client that can come back — a keyed request, an SDK retry — can rejoin).
package coord

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Head is the response head every subscriber writes.
type Head struct {
	Status int
	Header http.Header
	// Dedup overrides X-Oncegate-Dedup for every subscriber ("replayed");
	// empty means owner "miss", joiners "joined".
	Dedup string
	// Code is the gateway's error code of an error head, for the logs.
	Code string `json:",omitempty"`
}

// Errors of Acquire and Subscribe.
var (
	// ErrConflict: the identity is in flight with a different request body.
	ErrConflict = errors.New("coord: identity in flight with a different request")
	// ErrTruncated: the flight's output outgrew its buffer; it cannot be
	// joined from the start any more.
	ErrTruncated = errors.New("coord: flight output past the join buffer")
	// ErrGone: the flight is no longer in flight here (it finished, or
	// was never here).
	ErrGone = errors.New("coord: no such flight in flight")
	// ErrOwnerGone: the gateway that owns a flight another gateway's
	// client joined stopped before the output ended.
	ErrOwnerGone = errors.New("coord: the flight's owner is gone")
	// ErrUnavailable: the shared coordination (Redis) cannot be reached.
	ErrUnavailable = errors.New("coord: coordination unavailable")
	// ErrAbandoned: the flight another gateway's client joined ended
	// without an outcome on record (its owner lost its store): the store,
	// once it answers, says how the request ended.
	ErrAbandoned = errors.New("coord: the flight ended without an outcome on record")
)

// Subscription is one client's view of a logical request's output: from
// its first byte, then live — of a flight in this process (Reader), or of
// one another gateway owns. It is not safe for concurrent use.
type Subscription interface {
	// Head waits for the response head; it fails with ctx's error, or
	// ErrOwnerGone if another gateway owns the flight and stopped first.
	Head(ctx context.Context) (*Head, error)
	// Next waits for output past what was read and returns it, with done
	// once everything was read; errors as Head's.
	Next(ctx context.Context) (b []byte, done bool, err error)
	// Leave ends the subscription; the flight's work goes on for others.
	Leave()
}

// Flight is one logical request in flight. Its methods are safe for
// concurrent use: one writer (the call) and any number of subscribers.
type Flight struct {
	Identity  string
	RequestID string
	SHA256    string
	Deadline  time.Time

	local   *Local
	limit   int
	mu      sync.Mutex
	waiters []*Reader // the readers waiting for the next change
	head    *Head
	body    []byte // base[prefixRoom:], once there is output
	base    []byte // the array body is in, from its start
	staged  int    // bytes after body that Stage put there, not yet published
	trunc   bool
	done    bool
	gaveUp  bool // finished without an outcome on record (Abandon)
	subs    int
	joined  int
	retries int
	grace   time.Duration
	timer   *time.Timer
	cancel  context.CancelFunc
	ended   func() // called once the flight finished (SetOnFinish)
}

// Local is the in-process flight table. It is safe for concurrent use.
type Local struct {
	mu      sync.Mutex
	flights map[string]*Flight
	limit   int
	outAvg  atomic.Int64 // finished streams' output size, a running average
}

// NewLocal returns a flight table whose flights buffer at most limit bytes
// of output for joiners.
func NewLocal(limit int) *Local { return &Local{flights: map[string]*Flight{}, limit: limit} }

// Acquire returns the flight for identity: an existing one to join (owner
// false), or a new one the caller owns, whose work runs under ctx (the
// caller starts it). A flight with another body is ErrConflict; one past
// its join buffer is ErrTruncated.
func (l *Local) Acquire(identity, sha, requestID string, deadline time.Time) (f *Flight, owner bool, ctx context.Context, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.flights[identity]; f != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.SHA256 != sha:
			return nil, false, nil, ErrConflict
		case f.trunc:
			return nil, false, nil, ErrTruncated
		}
		f.subs++
		f.joined++
		if f.timer != nil { // a rejoin within the grace: keep the work alive
			f.timer.Stop()
			f.timer = nil
		}
		return f, false, nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	f = &Flight{Identity: identity, RequestID: requestID, SHA256: sha, Deadline: deadline, local: l, limit: l.limit,
		subs: 1, cancel: cancel}
	l.flights[identity] = f
	return f, true, ctx, nil
}

// Join subscribes one more client, from another gateway, to the flight in
// flight for identity — if it is still the request requestID: ErrGone if
// not, ErrTruncated past the join buffer. It counts as a joiner.
func (l *Local) Join(identity, requestID string) (*Flight, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.flights[identity]
	if f == nil || f.RequestID != requestID {
		return nil, ErrGone
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trunc {
		return nil, ErrTruncated
	}
	f.subs++
	f.joined++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	return f, nil
}

// Len is how many flights are in the table.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.flights)
}

// SetGrace sets how long the flight's work survives its last subscriber
// (0: cancelled at once).
func (f *Flight) SetGrace(d time.Duration) {
	f.mu.Lock()
	f.grace = d
	f.mu.Unlock()
}

// SetOnFinish sets what to do once the flight has finished (after it left
// the table and its end was published): a shared coordinator releases its
// claim there. Nil: nothing.
func (f *Flight) SetOnFinish(fn func()) {
	f.mu.Lock()
	f.ended = fn
	f.mu.Unlock()
}

// NoteClientRetry records an official SDK's retry count seen on an arrival
// that joined (docs/identity.md: client_retry_count).
func (f *Flight) NoteClientRetry(n int) {
	f.mu.Lock()
	f.retries = max(f.retries, n)
	f.mu.Unlock()
}

// ClientRetries is the largest SDK retry count seen among joiners.
func (f *Flight) ClientRetries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retries
}

// Joined is how many subscribers joined after the owner.
func (f *Flight) Joined() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.joined
}

// notify wakes the readers waiting for a change (under f.mu). Each
// reader has one wake-up channel for its life, not one per change: a
// stream's client waits between every two writes.
func (f *Flight) notify() {
	for _, r := range f.waiters {
		r.listed = false
		select {
		case r.wake <- struct{}{}:
		default: // already told
		}
	}
	clear(f.waiters)
	f.waiters = f.waiters[:0]
}

// SetHead publishes the response head.
func (f *Flight) SetHead(h *Head) {
	f.mu.Lock()
	f.head = h
	f.notify()
	f.mu.Unlock()
}

// Write publishes output bytes.
func (f *Flight) Write(b []byte) {
	if len(b) == 0 {
		return
	}
	f.mu.Lock()
	f.staged = 0
	if f.base == nil {
		f.start(len(b))
	}
	f.room(len(b))
	f.body = append(f.body, b...)
	if len(f.body) > f.limit {
		f.trunc = true // existing subscribers keep reading; no one new joins
	}
	f.notify()
	f.mu.Unlock()
}

// minOutput is the least capacity a flight's output starts with: a
// stream's opening frames.
const minOutput = 512

// maxExpected bounds the capacity a stream's output starts with.
const maxExpected = 64 << 10

// expected is the capacity a new stream's output starts with: a little
// more than the streams finished lately came to, so that a stream like
// them fills one array instead of leaving a trail of smaller ones to the
// collector (docs/performance.md, Memory).
func (l *Local) expected() int {
	return min(max(int(l.outAvg.Load())*5/4, minOutput), maxExpected, max(l.limit, minOutput))
}

// observe adds a finished stream's output size to the running average
// expected starts from (an eighth of the way to the new size).
func (l *Local) observe(n int) {
	for {
		avg := l.outAvg.Load()
		next := avg + (int64(n)-avg)/8
		if avg == 0 {
			next = int64(n)
		}
		if l.outAvg.CompareAndSwap(avg, next) {
			return
		}
	}
}

// prefixRoom is the room kept in front of a flight's output, for the
// ledger's header of the stored response (StagePrefixed).
const prefixRoom = 192

// start gives a stream's output its first array (under f.mu), with the
// room the streams before it needed (expected) and at least n bytes. A
// whole answer's array is sized by room, to the answer.
func (f *Flight) start(n int) {
	c := max(n, f.local.expected())
	nb := make([]byte, prefixRoom, prefixRoom+c)
	f.base, f.body = nb, nb[prefixRoom:]
}

// room makes room for n more bytes after the output (under f.mu),
// doubling the capacity — append's own growth falls to a quarter
// at a time for large slices, and each step leaves the old array as
// garbage, several times the output over a stream (docs/performance.md,
// Memory). What readers were given stays theirs: the bytes they hold are
// never written again.
func (f *Flight) room(n int) {
	if len(f.body)+n <= cap(f.body) {
		return
	}
	c := max(2*cap(f.body), len(f.body)+n, minOutput)
	nb := make([]byte, prefixRoom+len(f.body), prefixRoom+c)
	copy(nb[prefixRoom:], f.body)
	f.base, f.body = nb, nb[prefixRoom:]
}

// Stage puts b after the output without publishing it, and returns the
// output followed by b: what Finish(h, b) will publish, to store before
// it goes out, without a copy of its own. The result is read-only; it
// stays valid after Finish. A later Write, Finish or Abandon replaces
// what was staged.
func (f *Flight) Stage(b []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.room(len(b))
	f.staged = len(b)
	return append(f.body, b...)
}

// StagePrefixed is Stage, and returns prefix, the output and b as one
// slice of the flight's own array, prefix written in the room before the
// output: a stored response's header and body without a copy of the
// output. When prefix does not fit there (or there is nothing to stage
// and no output), it returns nil and stages nothing.
func (f *Flight) StagePrefixed(b, prefix []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(prefix) > prefixRoom || len(f.body)+len(b) == 0 {
		return nil
	}
	f.room(len(b))
	f.staged = len(b)
	out := append(f.body, b...)
	start := prefixRoom - len(prefix)
	copy(f.base[start:prefixRoom], prefix)
	return f.base[start : prefixRoom+len(out)]
}

// Finish removes the flight from the table — later arrivals go to the
// ledger — and then publishes the end of the output (and the head, if the
// answer is a whole response rather than a stream). In that order: a
// client that has read the end and asks again must find the ledger's
// record (a replay), not the flight that just ended (a join).
func (f *Flight) Finish(h *Head, body []byte) {
	f.local.remove(f)
	f.mu.Lock()
	if len(f.body) > 0 { // a stream: what the next one may need
		f.local.observe(len(f.body) + len(body))
	}
	if h != nil {
		f.head = h
	}
	if n := len(f.body); f.staged > 0 && f.staged == len(body) && bytes.Equal(f.body[n:n+f.staged], body) {
		// Publish what was staged as it is: whoever holds it (the
		// ledger, for a replay) may be reading it.
		f.body = f.body[:n+f.staged]
	} else {
		f.room(len(body))
		f.body = append(f.body, body...)
	}
	f.staged = 0
	f.done = true
	f.notify()
	ended := f.ended
	f.ended = nil
	f.mu.Unlock()
	if ended != nil {
		ended()
	}
}

// Abandon finishes the flight, as Finish, without an outcome on record:
// its owner could not commit one (its store failed). Its subscribers here
// read body as its end; another gateway's joiner learns it ended so
// (ErrAbandoned), not as an answer to relay.
func (f *Flight) Abandon(h *Head, body []byte) {
	f.mu.Lock()
	f.gaveUp = true
	f.mu.Unlock()
	f.Finish(h, body)
}

// Abandoned reports whether the flight finished by Abandon.
func (f *Flight) Abandoned() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gaveUp
}

// Done reports whether the flight has finished.
func (f *Flight) Done() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

func (l *Local) remove(f *Flight) {
	l.mu.Lock()
	if l.flights[f.Identity] == f {
		delete(l.flights, f.Identity)
	}
	l.mu.Unlock()
}

// Output returns the whole output so far (for storing a finished stream)
// and whether it was truncated.
func (f *Flight) Output() ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.body, f.trunc
}

// Leave ends one subscription. When none remain and the work is not done,
// the work is cancelled — at once, or after the grace if a subscriber may
// still come back.
func (f *Flight) Leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs--
	if f.subs > 0 || f.done {
		return
	}
	if f.grace <= 0 {
		f.cancel()
		return
	}
	f.timer = time.AfterFunc(f.grace, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.subs == 0 && !f.done {
			f.cancel()
		}
	})
}

// Cancel ends the flight's work now (for example when the server stops).
func (f *Flight) Cancel() { f.cancel() }

// Reader reads a flight's output from the start: a Subscription to a
// flight in this process. It is not safe for concurrent use; each
// subscriber has its own.
type Reader struct {
	f      *Flight
	off    int
	wake   chan struct{} // told of a change while the reader waits
	listed bool          // among the flight's waiters (under its mu)
}

var _ Subscription = (*Reader)(nil)

// NewReader starts reading f from its first byte, for a subscriber that
// Acquire or Join counted.
func (f *Flight) NewReader() *Reader { return &Reader{f: f, wake: make(chan struct{}, 1)} }

// waiting puts r among the flight's waiters until its next change (under
// f.mu) and returns the channel that change is told on.
func (r *Reader) waiting() chan struct{} {
	if !r.listed {
		r.listed = true
		r.f.waiters = append(r.f.waiters, r)
	}
	return r.wake
}

// Head waits for the response head.
func (r *Reader) Head(ctx context.Context) (*Head, error) {
	for {
		r.f.mu.Lock()
		h := r.f.head
		var ch chan struct{}
		if h == nil {
			ch = r.waiting()
		}
		r.f.mu.Unlock()
		if h != nil {
			return h, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Next waits for output past what this reader has seen and returns it,
// with done once the flight finished and everything was read.
func (r *Reader) Next(ctx context.Context) (b []byte, done bool, err error) {
	for {
		r.f.mu.Lock()
		body, fin := r.f.body, r.f.done
		var ch chan struct{}
		if r.off >= len(body) && !fin {
			ch = r.waiting()
		}
		r.f.mu.Unlock()
		if r.off < len(body) {
			b = body[r.off:]
			r.off = len(body)
			return b, false, nil
		}
		if fin {
			return nil, true, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Published returns the head without waiting: nil before it is
// published.
func (r *Reader) Published() *Head {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.f.head
}

// Ready returns without waiting the output past what the reader has read.
func (r *Reader) Ready() []byte {
	r.f.mu.Lock()
	body := r.f.body
	r.f.mu.Unlock()
	if r.off >= len(body) {
		return nil
	}
	b := body[r.off:]
	r.off = len(body)
	return b
}

// Leave ends the subscription (Flight.Leave).
func (r *Reader) Leave() { r.f.Leave() }

// Arrival is what places a request among the flights: its identity and
// body digest, the logical request it would become, and its deadline.
type Arrival struct {
	Identity  string
	SHA256    string
	RequestID string
	Deadline  time.Time
	// ClientRetries is the official SDK's retry count it carried.
	ClientRetries int
	// Tenant and RequestsPerMinute are its tenant and that tenant's rate
	// (0: none): a shared coordinator takes the rate's token with the
	// claim, in the same round trip.
	Tenant            string
	RequestsPerMinute int
}

// Place is where an arrival goes: it owns a new flight (Owner, its work
// under Work), or it joined the flight in flight in this process. Remote,
// when set on an owned flight, says that the logical request is in
// flight on another gateway: this flight relays that one's output to its
// subscribers rather than running the request.
type Place struct {
	Flight *Flight
	Owner  bool
	Work   context.Context
	Remote *Remote
	// Err, on an owned flight, is why it cannot run: ErrConflict (the
	// identity is in flight on another gateway with another body),
	// *RateLimited, or ErrUnavailable (the shared coordination cannot be
	// reached). The owner answers every subscriber with it.
	Err error
	// RateTaken says the tenant's rate was counted with the claim (the
	// caller must not count it again).
	RateTaken bool
}

// RateLimited refuses a new logical request of a tenant over its rate.
type RateLimited struct {
	RetryAfter time.Duration
}

func (e *RateLimited) Error() string {
	return "coord: the tenant is over its request rate (retry after " + e.RetryAfter.String() + ")"
}

// Remote names a logical request another gateway owns.
type Remote struct {
	Owner     string // the owning gateway's id
	RequestID string
	Deadline  time.Time
}

// Seen is what clients on other gateways were shown of a logical request
// whose owner stopped before it could record it: evidence its recovery
// puts in the receipt (docs/replicas.md).
type Seen struct {
	Joined  int   // arrivals that joined it from other gateways
	Emitted int64 // the most visible events any of them was relayed
}

// Place puts an arrival in this process's table (Acquire): coord.Local is
// the coordination of a single gateway.
func (l *Local) Place(_ context.Context, a Arrival) (Place, error) {
	f, owner, work, err := l.Acquire(a.Identity, a.SHA256, a.RequestID, a.Deadline)
	if err != nil {
		return Place{}, err
	}
	return Place{Flight: f, Owner: owner, Work: work}, nil
}
