package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
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
	return ledger.Event{RequestID: l.requestID, Seq: l.seq, Generation: l.gen, Type: typ, At: at, Data: ledger.Payload(data)}
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
		out[i].Data = ledger.Payload(v)
	}
	l.pending = l.pending[:0]
	return out
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
