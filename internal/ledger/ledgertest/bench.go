package ledgertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Writer is the part of a ledger.Store a request's durable writes use:
// what BenchmarkRequestWrites drives. Every ledger.Store is one; so are
// the write-path prototypes measured against the stores
// (internal/ledger/ledgerbench).
type Writer interface {
	Claim(ctx context.Context, rec *ledger.Record, events []ledger.Event) (existing *ledger.Record, created bool, err error)
	Finish(ctx context.Context, f *ledger.Finish) error
}

// Drainer is a Writer that finishes work after its calls return (a store
// written behind a log): Drain returns once all of it is done, and the
// benchmark's clock runs until then.
type Drainer interface {
	Drain() error
}

// BenchmarkRequestWrites measures a backend's write path alone: a logical
// request's claim (record, created, reserved, dispatched) and finish
// (observed, decision, terminal, stored response, receipt, charge), with
// the payload sizes the gateway writes, from clients concurrent requests.
// Besides ns/op (the wall time per request, all clients together) it
// reports requests/s and cpu-µs/req: the process's user and system CPU
// per request, where the platform tells it.
func BenchmarkRequestWrites(b *testing.B, st Writer, clients int) {
	// What the gateway writes for a one-attempt JSON request: the
	// created event holds the receipt's header, the observation and the
	// decision refer to the receipt written beside them.
	header := bytes.Repeat([]byte("h"), 960)
	small := bytes.Repeat([]byte("d"), 110)
	ref := []byte(`{"in_receipt":true,"ordinal":1}`)
	receiptBody := []byte(BenchReceipt)
	respBody := bytes.Repeat([]byte("b"), 590)
	var n atomic.Int64
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for n.Add(1) <= int64(b.N) {
				id := uuid.Must(uuid.NewV7()).String()
				sum := sha256.Sum256([]byte(id))
				now := time.Now()
				ev := func(seq int64, typ ledger.EventType, data []byte) ledger.Event {
					return ledger.Event{RequestID: id, Seq: seq, Generation: 1, Type: typ, At: now, Data: data}
				}
				rec := &ledger.Record{Identity: "f:" + hex.EncodeToString(sum[:]), RequestID: id, Tenant: "acme", Operation: "chat.completions",
					RequestSHA256: hex.EncodeToString(sum[:]), State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
				if _, _, err := st.Claim(ctx, rec, []ledger.Event{ev(1, ledger.EvCreated, header), ev(2, ledger.EvReserved, small), ev(3, ledger.EvDispatch, small)}); err != nil {
					b.Error(err)
					return
				}
				if err := st.Finish(ctx, &ledger.Finish{Identity: rec.Identity, RequestID: id, Generation: 1, State: ledger.Succeeded, At: now,
					Response: &ledger.Response{Status: 200, ContentType: "application/json", Attempts: 1, Body: respBody},
					Events:   []ledger.Event{ev(4, ledger.EvObserved, ref), ev(5, ledger.EvDecision, ref), ev(6, ledger.EvTerminal, small[:45])},
					Receipt:  receiptBody, Tenant: "acme", Charge: 1234}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if d, ok := st.(Drainer); ok {
		if err := d.Drain(); err != nil {
			b.Error(err)
		}
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer() // closing the store is not a request's cost
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "requests/s")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	}
}

// BenchReceipt is a receipt as the gateway writes it, of two attempts
// (1,845 bytes): what the write benchmarks store, and what the spend
// facts are derived from (ledger.ReceiptFacts).
const BenchReceipt = `{"request_id":"20261130T120000-000000007","tenant":"acme","operation":"chat.completions","model":"gpt-4o","key_id":"key_0123456789abcdef","key_name":"search-web","user":"ana@example.com","tags":["prod","eu"],"key_sha256":"k","request_sha256":"r","policy_sha256":"p","retry_owner":"oncegate","created_at":"2026-11-30T12:00:00Z","deadline":"2026-11-30T12:01:00Z","stream":false,"client_retry_count":0,"dedup":{"joined":0,"replayed":0},"request":{"estimated_input_tokens":0,"max_output_tokens":0,"max_data_boundary":"","accept_restart":false,"ineligible_routes":null},"attempts":[{"ordinal":1,"route":"openai-primary","route_ordinal":0,"provider":"azure","upstream_model":"","release":"","data_boundary":"","purpose":"","request_sha256":"","not_before":"2026-11-30T12:00:00Z","started_at":"2026-11-30T12:00:00Z","observed_at":"2026-11-30T12:00:01Z","jitter_ms":0,"outcome_class":"success","kind":"server_error","http_status":503,"visible_output":false,"emitted_tokens":0,"protocol_warnings":0,"usage":{"input_tokens":207,"output_tokens":57,"cached_tokens":0},"cost_usd":0.0010875,"reserved_usd":0,"breaker":{"state":"","generation":0}},{"ordinal":1,"route":"azure-east","route_ordinal":0,"provider":"azure","upstream_model":"","release":"","data_boundary":"","purpose":"","request_sha256":"","not_before":"2026-11-30T12:00:00Z","started_at":"2026-11-30T12:00:00Z","observed_at":"2026-11-30T12:00:01Z","jitter_ms":0,"outcome_class":"success","kind":"success","http_status":200,"visible_output":false,"emitted_tokens":0,"protocol_warnings":0,"usage":{"input_tokens":207,"output_tokens":57,"cached_tokens":0},"cost_usd":0.0010875,"reserved_usd":0,"breaker":{"state":"","generation":0}}],"decisions":null,"terminal":"succeeded","reason":"completed","totals":{"attempts":2,"providers":null,"billable_tokens":0,"cost_usd":0.0010875},"attempts_sha256":""}`
