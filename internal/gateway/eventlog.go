package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/jsonenc"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/receipt"
)

// eventLog writes one logical request's durable log (docs/identity.md): events
// numbered from 1 and fenced by the owner's generation.
//
// Observations and decisions need not be durable at once: they wait in
// memory for the request's next durable write — the next dispatch, or the
// terminal — and go in the same commit, in order. That saves a write per
// attempt and loses nothing recovery relies on: an observation lost in a
// crash leaves its attempt dispatched-but-unobserved, which recovery
// reads as indeterminate, the conservative reading. When they go with the
// terminal, the receipt in that commit holds every attempt and decision
// in full, so their events carry a reference to it instead of a copy.
type eventLog struct {
	store     ledger.Store
	lost      *atomic.Bool // the owner's lease was lost: write nothing more
	requestID string
	gen       int64
	seq       int64
	pending   []pendingEvent
}

// pendingEvent is an event waiting for the next durable write: data is
// its payload, ref what stands for it beside a receipt.
type pendingEvent struct {
	ev        ledger.Event
	data, ref any
}

func (l *eventLog) event(typ ledger.EventType, at time.Time, data any) ledger.Event {
	l.seq++
	return ledger.Event{RequestID: l.requestID, Seq: l.seq, Generation: l.gen, Type: typ, At: at, Data: payload(data)}
}

// selfEncoding is an event payload that writes encoding/json's bytes for
// itself, without reflection; ok is false for a value it leaves to
// encoding/json.
type selfEncoding interface {
	AppendJSON(b []byte) (_ []byte, ok bool)
}

// payload encodes an event's data. Every request writes the same few
// payloads (docs/performance.md): the receipt and the small ones below
// write themselves; anything else goes through encoding/json.
func payload(data any) []byte {
	switch d := data.(type) {
	case *receipt.Receipt:
		// Without encoding/json checking and compacting what
		// MarshalJSON returned: the created event of every request.
		b, _ := d.JSON()
		return b
	case selfEncoding:
		if b, ok := d.AppendJSON(make([]byte, 0, 128)); ok {
			return b
		}
	}
	b, _ := json.Marshal(data) // plain structs and maps: cannot fail
	return b
}

// later queues an event for the next durable write.
func (l *eventLog) later(typ ledger.EventType, at time.Time, data, ref any) {
	l.seq++
	l.pending = append(l.pending, pendingEvent{ev: ledger.Event{RequestID: l.requestID, Seq: l.seq, Generation: l.gen, Type: typ, At: at},
		data: data, ref: ref})
}

// amend replaces the payload of the last queued event of type typ: a
// decision taken again before it was written.
func (l *eventLog) amend(typ ledger.EventType, data any) {
	if l == nil {
		return // before the claim: the created event will carry it
	}
	for i := len(l.pending) - 1; i >= 0; i-- {
		if l.pending[i].ev.Type == typ {
			l.pending[i].data = data
			return
		}
	}
}

// append writes evs after every queued event and returns once all are
// durable.
func (l *eventLog) append(ctx context.Context, evs ...ledger.Event) error {
	if l.lost != nil && l.lost.Load() {
		return errLeaseLost
	}
	return storeErr(l.store.Append(ctx, true, append(l.take(false), evs...)...))
}

// take returns the queued events, encoded in full or — beside the
// receipt — by reference, and forgets them.
func (l *eventLog) take(beside bool) []ledger.Event {
	out := make([]ledger.Event, len(l.pending), len(l.pending)+1)
	for i, p := range l.pending {
		v := p.data
		if beside {
			v = p.ref
		}
		out[i] = p.ev
		out[i].Data = payload(v)
	}
	l.pending = l.pending[:0]
	return out
}

func (r receiptRef) AppendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"in_receipt":`...)
	b = strconv.AppendBool(b, r.InReceipt)
	if r.Ordinal != 0 {
		b = append(b, `,"ordinal":`...)
		b = strconv.AppendInt(b, int64(r.Ordinal), 10)
	}
	if r.AfterAttempt != 0 {
		b = append(b, `,"after_attempt":`...)
		b = strconv.AppendInt(b, int64(r.AfterAttempt), 10)
	}
	return append(b, '}'), true
}

// terminalEvent is the payload of request_terminal (its members in the
// order encoding/json wrote the map it once was).
type terminalEvent struct {
	Reason   string `json:"reason"`
	Terminal string `json:"terminal"`
}

func (t terminalEvent) AppendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"reason":`...)
	b = jsonenc.AppendString(b, t.Reason, jsonenc.Std)
	b = append(b, `,"terminal":`...)
	b = jsonenc.AppendString(b, t.Terminal, jsonenc.Std)
	return append(b, '}'), true
}

// errStore marks a store failure that is not a refusal: the store could
// not be reached, or failed.
var errStore = errors.New("store unavailable")

// storeErr wraps a store error that is not a fencing refusal with
// errStore.
func storeErr(err error) error {
	if err == nil || errors.Is(err, ledger.ErrStaleGeneration) || errors.Is(err, ledger.ErrFinished) || errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: %w", errStore, err)
}
