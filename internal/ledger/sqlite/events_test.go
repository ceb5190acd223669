package sqlite

import (
	"reflect"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

func TestPackedEventsRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	evs := []ledger.Event{
		{RequestID: "r", Seq: 1, Generation: 1, Type: ledger.EvCreated, At: at, Data: []byte(`{"a":1}`)},
		{RequestID: "r", Seq: 2, Generation: 1, Type: ledger.EvReserved, At: at.Add(time.Millisecond), Data: []byte{0, 0xff}},
		{RequestID: "r", Seq: 3, Generation: 2, Type: ledger.EvDispatch},
	}
	row := rowOf(evs)
	if row.typ != typePacked || row.seq != 1 || row.lastSeq != 3 || row.dispatched != 1 || row.observed != 0 {
		t.Fatalf("row %+v", row)
	}
	got, err := expandRow("r", row.seq, row.gen, row.typ, row.at, row.data)
	if err != nil || !reflect.DeepEqual(got, evs) {
		t.Fatalf("round trip: %+v, %v\nwant %+v", got, err, evs)
	}
	// One event keeps the columns: the form every row had before schema 3.
	one := rowOf(evs[:1])
	if one.typ != string(ledger.EvCreated) || string(one.data) != `{"a":1}` || one.lastSeq != 1 {
		t.Fatalf("single row %+v", one)
	}
	for _, bad := range [][]byte{nil, {0x02}, {packedV1}, {packedV1, 1}, {packedV1, 1, 1, 5, 'a'}, {packedV1, 1, 1, 1, 'a', 0, 9, 'x'}} {
		if _, err := expandRow("r", 1, 1, typePacked, 0, bad); err == nil {
			t.Fatalf("decoded %q", bad)
		}
	}
}

func FuzzUnpackEvents(f *testing.F) {
	f.Add(packEvents([]ledger.Event{{Seq: 1, Generation: 1, Type: "t", Data: []byte("x")}, {Seq: 2, Type: "u"}}))
	f.Add([]byte{packedV1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := unpackEvents("r", in)
		if err != nil {
			return
		}
		again, err := unpackEvents("r", packEvents(evs))
		if err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("re-packed %+v does not unpack to the same: %+v, %v", evs, again, err)
		}
	})
}
