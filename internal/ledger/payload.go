package ledger

import (
	"encoding/json"
	"strconv"

	"github.com/oncegate/oncegate/internal/jsonenc"
)

// selfEncoding is an event payload that writes encoding/json's bytes for
// itself, without reflection; ok is false for a value it leaves to
// encoding/json.
type selfEncoding interface {
	AppendJSON(b []byte) (_ []byte, ok bool)
}

// Payload encodes an event's data. Every request writes the same few
// payloads (docs/performance.md): the receipt and the small ones below
// write themselves; anything else goes through encoding/json.
func Payload(data any) []byte {
	switch d := data.(type) {
	case selfMarshaling:
		// A receipt, without encoding/json checking and compacting what
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

// AppendJSON appends r as encoding/json would.
func (r ReceiptRef) AppendJSON(b []byte) ([]byte, bool) {
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

// TerminalEvent is the payload of request_terminal (its members in the
// order encoding/json wrote the map it once was).
type TerminalEvent struct {
	Reason   string `json:"reason"`
	Terminal string `json:"terminal"`
}

// AppendJSON appends t as encoding/json would.
func (t TerminalEvent) AppendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"reason":`...)
	b = jsonenc.AppendString(b, t.Reason, jsonenc.Std)
	b = append(b, `,"terminal":`...)
	b = jsonenc.AppendString(b, t.Terminal, jsonenc.Std)
	return append(b, '}'), true
}

// ReceiptRef is the payload of an event whose content the receipt beside
// it holds: which attempt or decision of it.
type ReceiptRef struct {
	InReceipt    bool `json:"in_receipt"`
	Ordinal      int  `json:"ordinal,omitempty"`
	AfterAttempt int  `json:"after_attempt,omitempty"`
}

// selfMarshaling is a payload that makes its own JSON whole (a receipt).
type selfMarshaling interface {
	JSON() ([]byte, error)
}
