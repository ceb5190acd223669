package gateway

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

// eventLog writes one logical request's durable log (DESIGN §3.3): events
// numbered from 1 and fenced by the owner's generation. A nil store makes
// every write a no-op (the ledger is disabled).
type eventLog struct {
	store     ledger.Store
	requestID string
	gen       int64
	seq       int64
}

func (l *eventLog) event(typ ledger.EventType, at time.Time, data any) ledger.Event {
	l.seq++
	if l.store == nil {
		return ledger.Event{} // no ledger: nothing will be written
	}
	b, _ := json.Marshal(data) // plain structs and maps: cannot fail
	return ledger.Event{RequestID: l.requestID, Seq: l.seq, Generation: l.gen, Type: typ, At: at, Data: b}
}

// append writes events; with wait it returns once they are durable.
func (l *eventLog) append(ctx context.Context, wait bool, evs ...ledger.Event) error {
	if l.store == nil {
		return nil
	}
	return l.store.Append(ctx, wait, evs...)
}

// dispatchEvent is the payload of attempt_reserved and attempt_dispatched.
type dispatchEvent struct {
	Ordinal    int       `json:"ordinal"`
	Route      string    `json:"route"`
	Purpose    string    `json:"purpose"`
	NotBefore  time.Time `json:"not_before"`
	ReserveUSD float64   `json:"reserve_usd"`
}

// failpoint blocks forever at a named point when ONCEGATE_FAILPOINT names
// it, after saying so on stderr: crash tests kill the process there.
func failpoint(name string) {
	if os.Getenv("ONCEGATE_FAILPOINT") != name {
		return
	}
	_, _ = os.Stderr.WriteString("ONCEGATE_FAILPOINT " + name + " reached\n")
	select {}
}
