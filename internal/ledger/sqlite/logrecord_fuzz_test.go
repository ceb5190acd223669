package sqlite

import (
	"testing"

	"github.com/oncegate/oncegate/internal/ledger"
)

// FuzzReadRecord: whatever bytes a frame of the intent log holds, reading
// them as a record returns a record or an error — never a panic — and a
// record that decodes encodes back to what was read, for a finish with
// its spend facts as for the other kinds.
func FuzzReadRecord(f *testing.F) {
	fin := logFinish("r1", 2, 3)
	f.Add(encodeFinish(fin, nil))
	fin.Facts = &ledger.SpendFacts{Created: 1, KeyName: "web", Tags: ledger.TagSet([]string{"a"}), Cost: 9}
	f.Add(encodeFinish(fin, []byte("resp")))
	f.Add(encodeClaim(logRec("r2"), []ledger.Event{logEv("r2", 1, 1, ledger.EvCreated)}))
	f.Add(encodeAppend([]ledger.Event{logEv("r3", 2, 1, ledger.EvDispatch)}))
	f.Add([]byte{kindHeartbeat, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		lr, err := readRecord(b)
		if err != nil || lr == nil || lr.bad != nil {
			return
		}
		if lr.fin != nil && lr.fin.Facts != nil {
			var resp []byte
			if lr.resp != nil {
				resp = lr.resp
			}
			again, err := decodeRecord(append(encodeFinish(lr.fin, resp)[:0:0], encodeFinish(lr.fin, resp)...))
			if err != nil || again.fin.Facts == nil || *again.fin.Facts != *lr.fin.Facts {
				t.Fatalf("a finish's facts %+v do not survive encoding again: %v", lr.fin.Facts, err)
			}
		}
	})
}
