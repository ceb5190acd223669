package ledger

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestStoredResponseRoundTrips(t *testing.T) {
	for _, r := range []*Response{
		{Status: 200, ContentType: "text/event-stream", Route: "primary", Attempts: 2, Body: []byte("data: {}\n\n")},
		{Status: 429, ContentType: "application/json", Attempts: 0, Body: []byte{}, Truncated: true},
		{Status: 200, ContentType: "application/json", Attempts: 1, Body: bytes.Repeat([]byte{0, 0xff, '{'}, 1000)},
	} {
		b, err := EncodeResponse(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResponse(b)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
		}
		// Its prefix and its body, written by the caller, are the
		// encoding, which a store then keeps as it is.
		prefix, err := ResponsePrefix(r)
		if err != nil || !bytes.Equal(append(prefix, r.Body...), b) {
			t.Fatalf("prefix %q and body are not the encoding %q: %v", prefix, b, err)
		}
		pre := *r
		pre.Encoded = append(prefix, r.Body...)
		if again, err := EncodeResponse(&pre); err != nil || &again[0] != &pre.Encoded[0] {
			t.Fatalf("a response already encoded is encoded again: %v", err)
		}
		// The first encoding (one JSON document) still reads.
		old, _ := json.Marshal(r)
		if got, err := DecodeResponse(old); err != nil || got.Status != r.Status || !bytes.Equal(got.Body, r.Body) {
			t.Fatalf("old encoding: %+v, %v", got, err)
		}
	}
	for _, bad := range [][]byte{nil, {0x02}, {0x02, 0xff}, {0x02, 10, '{'}, {0x07, 1, 2}} {
		if _, err := DecodeResponse(bad); err == nil {
			t.Fatalf("decoded %q", bad)
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	b, _ := EncodeResponse(&Response{Status: 200, ContentType: "a", Body: []byte("x")})
	f.Add(b)
	f.Add([]byte(`{"status":200,"body":"eA=="}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeResponse(in)
		if err != nil || in[0] != responseV2 {
			return
		}
		again, err := EncodeResponse(r)
		if err != nil {
			t.Fatal(err)
		}
		if r2, err := DecodeResponse(again); err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-encoded %q does not decode to the same: %v", again, err)
		}
	})
}
