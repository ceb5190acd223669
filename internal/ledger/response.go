package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
)

// responseV2 marks a stored response encoded as its metadata (JSON) and
// then its body as raw bytes, rather than one JSON document whose body is
// base64 (the first encoding, which starts with '{' and is still read).
const responseV2 = 0x02

// responseMeta is a stored response without its body.
type responseMeta struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Route       string `json:"route,omitempty"`
	Attempts    int    `json:"attempts"`
	Truncated   bool   `json:"truncated,omitempty"`
}

// EncodeResponse encodes a stored response for a backend to keep:
// ResponsePrefix(r), then the body. A response whose Encoded is set is
// that already.
func EncodeResponse(r *Response) ([]byte, error) {
	if r.Encoded != nil {
		return r.Encoded, nil
	}
	prefix, err := ResponsePrefix(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(prefix)+len(r.Body))
	out = append(out, prefix...)
	return append(out, r.Body...), nil
}

// ResponsePrefix is what a stored response's encoding puts before its
// body: 0x02, uvarint(len(meta)), meta (JSON). A caller holding room in
// front of the body can write it there and set Response.Encoded, so that
// the body is not copied to be stored.
func ResponsePrefix(r *Response) ([]byte, error) {
	meta, err := json.Marshal(responseMeta{Status: r.Status, ContentType: r.ContentType, Route: r.Route, Attempts: r.Attempts, Truncated: r.Truncated})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(meta))
	out = append(out, responseV2)
	out = binary.AppendUvarint(out, uint64(len(meta)))
	return append(out, meta...), nil
}

var errBadResponse = errors.New("malformed stored response")

// DecodeResponse reads what EncodeResponse wrote (or the first, JSON,
// encoding).
func DecodeResponse(b []byte) (*Response, error) {
	r := &Response{}
	if len(b) > 0 && b[0] == '{' {
		return r, json.Unmarshal(b, r)
	}
	if len(b) == 0 || b[0] != responseV2 {
		return nil, errBadResponse
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, errBadResponse
	}
	var m responseMeta
	if err := json.Unmarshal(b[1+k:1+k+int(n)], &m); err != nil {
		return nil, err
	}
	r.Status, r.ContentType, r.Route, r.Attempts, r.Truncated = m.Status, m.ContentType, m.Route, m.Attempts, m.Truncated
	r.Body = b[1+k+int(n):]
	return r, nil
}
