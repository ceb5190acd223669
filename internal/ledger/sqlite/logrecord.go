package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/ledger"
)

// The intent log's records (LogStore): a kind byte, the record's log
// sequence number (LSN) as 8 little-endian bytes, then the fields in
// order — strings and bytes as a uvarint length and the bytes, numbers as
// varints, events as a count and each event's fields. The LSN is written
// last, once the record is known to fit in a frame: it is what the store
// behind the log records as applied.
const (
	kindClaim     = 'C'
	kindAppend    = 'A'
	kindFinish    = 'F'
	kindReplace   = 'R' // a claim in the place of a finished request (Replace)
	kindHeartbeat = 'H'
	lsnOff        = 1
	recordHead    = 1 + 8
)

// logRecord is a decoded record.
type logRecord struct {
	kind   byte
	lsn    int64
	rec    *ledger.Record // claim, replace
	prev   string         // replace: the request id whose record it replaces
	events []ledger.Event // claim, replace, append (the finish's are in fin)
	fin    *ledger.Finish // finish
	resp   []byte         // finish: the stored response, encoded (nil: none)
	raw    []byte         // the record as the log holds it
	bad    error          // it could not be decoded (readRecord): applying it fails with this
	// facts are a finish's receipt's spend facts (factArgs), once derived.
	facts   []any
	derived bool
}

// factArgs derives a finish's receipt's spend facts once: LogStore.apply
// derives them on its goroutine before the writer's takes the records.
func (lr *logRecord) factArgs() []any {
	if !lr.derived && lr.fin != nil {
		lr.facts, lr.derived = finishFacts(lr.fin), true
	}
	return lr.facts
}

// newRecord starts a record of kind with room for size more bytes: its
// buffer is allocated once, not grown field by field.
func newRecord(kind byte, size int) []byte {
	b := make([]byte, recordHead, recordHead+size)
	b[0] = kind
	return b
}

// eventsSize bounds the bytes appendEvents adds for evs.
func eventsSize(requestID string, evs []ledger.Event) int {
	n := len(requestID) + 2*binary.MaxVarintLen64
	for _, e := range evs {
		n += len(e.Type) + len(e.Data) + 6*binary.MaxVarintLen64
	}
	return n
}

func setLSN(b []byte, lsn int64) { binary.LittleEndian.PutUint64(b[lsnOff:], uint64(lsn)) }

func encodeClaim(r *ledger.Record, evs []ledger.Event) []byte {
	return appendClaim(newRecord(kindClaim, claimSize(r, evs)), r, evs)
}

// encodeReplace is a claim of r in the place of request prev's record:
// prev, then the claim's fields.
func encodeReplace(prev string, r *ledger.Record, evs []ledger.Event) []byte {
	b := newRecord(kindReplace, len(prev)+binary.MaxVarintLen64+claimSize(r, evs))
	return appendClaim(appendString(b, prev), r, evs)
}

// claimSize bounds the bytes appendClaim adds.
func claimSize(r *ledger.Record, evs []ledger.Event) int {
	return len(r.Identity) + len(r.RequestID) + len(r.Tenant) + len(r.Operation) + len(r.RequestSHA256) + len(r.State) + len(r.Owner) +
		12*binary.MaxVarintLen64 + eventsSize(r.RequestID, evs)
}

func appendClaim(b []byte, r *ledger.Record, evs []ledger.Event) []byte {
	for _, v := range []string{r.Identity, r.RequestID, r.Tenant, r.Operation, r.RequestSHA256, string(r.State), r.Owner} {
		b = appendString(b, v)
	}
	stream := int64(0)
	if r.Stream {
		stream = 1
	}
	for _, v := range []int64{stream, r.Generation, ns(r.LeaseUntil), ns(r.CreatedAt), ns(r.FinishedAt)} {
		b = binary.AppendVarint(b, v)
	}
	return appendEvents(b, r.RequestID, evs)
}

func encodeAppend(evs []ledger.Event) []byte {
	return appendEvents(newRecord(kindAppend, eventsSize(evs[0].RequestID, evs)), evs[0].RequestID, evs)
}

func encodeFinish(f *ledger.Finish, resp []byte) []byte {
	size := len(f.Identity) + len(f.RequestID) + len(f.State) + len(f.Tenant) + len(f.Key) + len(resp) + len(f.Receipt) +
		12*binary.MaxVarintLen64 + eventsSize(f.RequestID, f.Events)
	if sf := f.Facts; sf != nil {
		size += len(sf.KeyID) + len(sf.KeyName) + len(sf.User) + len(sf.Model) + len(sf.Tags) + 11*binary.MaxVarintLen64
	}
	b := newRecord(kindFinish, size)
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
	if resp != nil {
		flags |= 4
	}
	if f.Receipt != nil {
		flags |= 8
	}
	if f.Facts != nil && f.Receipt != nil {
		flags |= 16
	}
	for _, v := range []int64{f.Generation, ns(f.At), f.Charge, flags} {
		b = binary.AppendVarint(b, v)
	}
	b = appendBytes(b, resp)
	b = appendBytes(b, f.Receipt)
	b = appendEvents(b, f.RequestID, f.Events)
	if flags&16 != 0 {
		// The receipt's spend facts, as the gateway gave them: the
		// applier stores them without decoding the receipt.
		sf := f.Facts
		for _, v := range []string{sf.KeyID, sf.KeyName, sf.User, sf.Model, sf.Tags} {
			b = appendString(b, v)
		}
		for _, v := range []int64{sf.Created, sf.Attempts, sf.InputTokens, sf.OutputTokens, sf.Cost, sf.Orphans} {
			b = binary.AppendVarint(b, v)
		}
	}
	return b
}

func appendEvents(b []byte, requestID string, evs []ledger.Event) []byte {
	b = appendString(b, requestID)
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for _, e := range evs {
		b = binary.AppendVarint(b, e.Seq)
		b = binary.AppendVarint(b, e.Generation)
		b = appendString(b, string(e.Type))
		b = binary.AppendVarint(b, ns(e.At))
		b = appendBytes(b, e.Data)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// errBadRecord: a record that passed its frame's checksum does not decode
// (a bug, never a torn write).
var errBadRecord = errors.New("ledger log: undecodable record")

// decoder reads a record's fields; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadRecord
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) events() []ledger.Event {
	id := d.string()
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadRecord
		return nil
	}
	evs := make([]ledger.Event, 0, n)
	for range n {
		e := ledger.Event{RequestID: id, Seq: d.varint(), Generation: d.varint(), Type: ledger.EventType(d.string()), At: fromNS(d.varint())}
		if data := d.bytes(); len(data) > 0 {
			e.Data = data
		}
		evs = append(evs, e)
	}
	return evs
}

// decodeRecord decodes b (which the result aliases).
// readRecord decodes a record of the log: one it cannot decode but whose
// LSN it can read (a bug) comes back with bad set, for the applier to set
// aside (Store.applyLog) rather than stop at.
func readRecord(b []byte) (*logRecord, error) {
	lr, err := decodeRecord(b)
	if err != nil && len(b) >= recordHead {
		return &logRecord{kind: b[0], lsn: int64(binary.LittleEndian.Uint64(b[lsnOff:])), raw: b, bad: err}, nil
	}
	if lr != nil {
		lr.raw = b
	}
	return lr, err
}

func decodeRecord(b []byte) (*logRecord, error) {
	if len(b) < recordHead {
		return nil, errBadRecord
	}
	lr := &logRecord{kind: b[0], lsn: int64(binary.LittleEndian.Uint64(b[lsnOff:]))}
	d := &decoder{b: b[recordHead:]}
	switch lr.kind {
	case kindHeartbeat:
	case kindClaim, kindReplace:
		if lr.kind == kindReplace {
			lr.prev = d.string()
		}
		r := &ledger.Record{Identity: d.string(), RequestID: d.string(), Tenant: d.string(), Operation: d.string(),
			RequestSHA256: d.string(), State: ledger.State(d.string()), Owner: d.string()}
		r.Stream = d.varint() == 1
		r.Generation, r.LeaseUntil, r.CreatedAt, r.FinishedAt = d.varint(), fromNS(d.varint()), fromNS(d.varint()), fromNS(d.varint())
		lr.rec, lr.events = r, d.events()
	case kindAppend:
		lr.events = d.events()
	case kindFinish:
		f := &ledger.Finish{Identity: d.string(), RequestID: d.string(), State: ledger.State(d.string()), Tenant: d.string(), Key: d.string()}
		f.Generation, f.At, f.Charge = d.varint(), fromNS(d.varint()), d.varint()
		flags := d.varint()
		f.Release, f.Takeover = flags&1 != 0, flags&2 != 0
		resp, receipt := d.bytes(), d.bytes()
		if flags&4 != 0 {
			lr.resp = resp
		}
		if flags&8 != 0 {
			f.Receipt = receipt
		}
		f.Events = d.events()
		if flags&16 != 0 {
			sf := &ledger.SpendFacts{KeyID: d.string(), KeyName: d.string(), User: d.string(), Model: d.string(), Tags: d.string()}
			sf.Created, sf.Attempts, sf.InputTokens, sf.OutputTokens, sf.Cost, sf.Orphans = d.varint(), d.varint(), d.varint(), d.varint(), d.varint(), d.varint()
			f.Facts = sf
		}
		lr.fin = f
	default:
		return nil, fmt.Errorf("%w: kind %q", errBadRecord, lr.kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errBadRecord
	}
	if d.err != nil {
		return nil, fmt.Errorf("record %d: %w", lr.lsn, d.err)
	}
	return lr, nil
}
