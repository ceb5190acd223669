package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
)

// One write's events share one row of the events table (schema 3): a
// request's claim, its terminal and each dispatch in between are one row
// each, not one per event, so a commit inserts a third of the rows and
// index entries it used to. A row holding one event keeps it in the
// columns, as every row did before; a row holding several has the type
// "packed" and its data is their encoding below. The row's seq is its
// first event's, last_seq its last's, and dispatched and observed count
// its attempt_dispatched and attempt_observed events, so recovery still
// classifies requests with one set-based statement. A request's receipt
// is its row with seq 0 and the type "receipt", in write order beside the
// terminal it belongs to.

// typePacked is the type of a row holding several events.
const typePacked = "packed"

// packedV1 starts the first encoding of a packed row.
const packedV1 = 0x01

// eventRow is one row to insert.
type eventRow struct {
	requestID            string
	seq, lastSeq, gen    int64
	typ                  string
	at                   int64
	dispatched, observed int
	data                 []byte
}

// args are the row's values in eventCols order.
func (r *eventRow) args() []any {
	return []any{r.requestID, r.seq, r.lastSeq, r.gen, r.typ, r.at, r.dispatched, r.observed, r.data}
}

// eventCols are the columns an eventRow fills.
const eventCols = `request_id, seq, last_seq, generation, type, at, dispatched, observed, data`

// rowOf packs evs (one request's, in sequence order, at least one) into
// one row.
func rowOf(evs []ledger.Event) eventRow {
	first, last := evs[0], evs[len(evs)-1]
	r := eventRow{requestID: first.RequestID, seq: first.Seq, lastSeq: last.Seq, gen: first.Generation, at: ns(first.At)}
	for _, e := range evs {
		switch e.Type {
		case ledger.EvDispatch:
			r.dispatched++
		case ledger.EvObserved:
			r.observed++
		}
	}
	if len(evs) == 1 {
		r.typ, r.data = string(first.Type), first.Data
		return r
	}
	r.typ, r.data = typePacked, packEvents(evs)
	return r
}

// packEvents is 0x01 and then, per event: uvarint seq, uvarint
// generation, uvarint len(type), type, varint at (Unix ns, 0 for none),
// uvarint len(data), data.
func packEvents(evs []ledger.Event) []byte {
	n := 1
	for _, e := range evs {
		n += 5*binary.MaxVarintLen64 + len(e.Type) + len(e.Data)
	}
	out := make([]byte, 1, n)
	out[0] = packedV1
	for _, e := range evs {
		out = binary.AppendUvarint(out, uint64(e.Seq))
		out = binary.AppendUvarint(out, uint64(e.Generation))
		out = binary.AppendUvarint(out, uint64(len(e.Type)))
		out = append(out, e.Type...)
		out = binary.AppendVarint(out, ns(e.At))
		out = binary.AppendUvarint(out, uint64(len(e.Data)))
		out = append(out, e.Data...)
	}
	return out
}

var errBadPacked = errors.New("malformed packed events")

// unpackEvents decodes a packed row of requestID's events. The events'
// data alias b.
func unpackEvents(requestID string, b []byte) ([]ledger.Event, error) {
	if len(b) == 0 || b[0] != packedV1 {
		return nil, errBadPacked
	}
	b = b[1:]
	uvarint := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	bytesOf := func() ([]byte, bool) {
		n, ok := uvarint()
		if !ok || n > uint64(len(b)) {
			return nil, false
		}
		v := b[:n:n]
		b = b[n:]
		return v, true
	}
	var out []ledger.Event
	for len(b) > 0 {
		seq, ok1 := uvarint()
		gen, ok2 := uvarint()
		typ, ok3 := bytesOf()
		if !ok1 || !ok2 || !ok3 || seq > 1<<62 || gen > 1<<62 {
			return nil, errBadPacked
		}
		at, k := binary.Varint(b)
		if k <= 0 {
			return nil, errBadPacked
		}
		b = b[k:]
		data, ok := bytesOf()
		if !ok {
			return nil, errBadPacked
		}
		if len(data) == 0 {
			data = nil
		}
		out = append(out, ledger.Event{RequestID: requestID, Seq: int64(seq), Generation: int64(gen), Type: ledger.EventType(typ), At: fromNS(at), Data: data})
	}
	if len(out) == 0 {
		return nil, errBadPacked
	}
	return out, nil
}

// expandRow turns one stored row into its events.
func expandRow(requestID string, seq, gen int64, typ string, at int64, data []byte) ([]ledger.Event, error) {
	if typ != typePacked {
		return []ledger.Event{{RequestID: requestID, Seq: seq, Generation: gen, Type: ledger.EventType(typ), At: fromNS(at), Data: data}}, nil
	}
	evs, err := unpackEvents(requestID, data)
	if err != nil {
		return nil, fmt.Errorf("events of %s from #%d: %w", requestID, seq, err)
	}
	return evs, nil
}
