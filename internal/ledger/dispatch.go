package ledger

import (
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/jsonenc"
)

// Dispatch is the payload of attempt_reserved and attempt_dispatched
// events: which attempt, on which route, for what, not before when, and
// the worst case it reserved.
type Dispatch struct {
	Ordinal    int       `json:"ordinal"`
	Route      string    `json:"route"`
	Purpose    string    `json:"purpose"`
	NotBefore  time.Time `json:"not_before"`
	ReserveUSD float64   `json:"reserve_usd"`
}

// AppendJSON appends d as JSON without reflection; ok is false for a
// time encoding/json would refuse.
func (d Dispatch) AppendJSON(b []byte) ([]byte, bool) {
	if y := d.NotBefore.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := d.NotBefore.Zone(); off <= -24*3600 || off >= 24*3600 {
		return b, false
	}
	b = append(b, `{"ordinal":`...)
	b = strconv.AppendInt(b, int64(d.Ordinal), 10)
	b = append(b, `,"route":`...)
	b = jsonenc.AppendString(b, d.Route, jsonenc.Std)
	b = append(b, `,"purpose":`...)
	b = jsonenc.AppendString(b, d.Purpose, jsonenc.Std)
	b = append(b, `,"not_before":"`...)
	b = d.NotBefore.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","reserve_usd":`...)
	b, ok := jsonenc.AppendFloat(b, d.ReserveUSD)
	return append(b, '}'), ok
}
