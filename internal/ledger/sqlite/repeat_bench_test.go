package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/oncegate/oncegate/internal/ledger"
)

// BenchmarkRepeatedQuestions is the gateway's write path for the same
// questions asked round after round (docs/performance.md, "At steady
// state"): each round claims the same identities; from the second, each
// claim finds its finished twin and replaces it, as a keyless request
// past its replay window does. It reports each round's CPU per request;
// ONCEGATE_BENCH_PROFILE=PREFIX writes each round's CPU profile to
// PREFIX.roundN.
func BenchmarkRepeatedQuestions(b *testing.B) {
	const rounds, clients = 3, 32
	for _, kind := range []string{"repeated", "distinct"} {
		b.Run(kind, func(b *testing.B) {
			st, err := OpenLog(filepath.Join(b.TempDir(), "bench.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var seq atomic.Int64
			for r := range rounds {
				name := func(i int64) string { return fmt.Sprintf("q%d", i) }
				if kind == "distinct" {
					base := int64(r) * int64(b.N)
					name = func(i int64) string { return fmt.Sprintf("q%d", base+i) }
				}
				var f *os.File
				if p := os.Getenv("ONCEGATE_BENCH_PROFILE"); p != "" {
					f, _ = os.Create(fmt.Sprintf("%s.%s.round%d", p, kind, r+1))
					_ = pprof.StartCPUProfile(f)
				}
				start, cpu0 := time.Now(), processCPUTime()
				repeatRound(b, st, clients, b.N, name, &seq)
				if err := st.barrier(context.Background()); err != nil {
					b.Fatal(err)
				}
				elapsed, cpu := time.Since(start), processCPUTime()-cpu0
				if f != nil {
					pprof.StopCPUProfile()
					_ = f.Close()
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), fmt.Sprintf("round%d-req/s", r+1))
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), fmt.Sprintf("round%d-cpu-µs/req", r+1))
			}
		})
	}
}

// repeatRound asks the n questions name(0..n-1) from clients at once:
// a claim (a replace if a finished twin holds the identity) and a finish
// with the gateway's payload sizes.
func repeatRound(b *testing.B, st *LogStore, clients, n int, name func(int64) string, seq *atomic.Int64) {
	header := bytes.Repeat([]byte("h"), 960)
	small := bytes.Repeat([]byte("d"), 110)
	ref := []byte(`{"in_receipt":true,"ordinal":1}`)
	receiptBody := bytes.Repeat([]byte("r"), 1770)
	respBody := bytes.Repeat([]byte("b"), 590)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			ctx := context.Background()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				seq.Add(1)
				id := uuid.Must(uuid.NewV7()).String()
				sum := sha256.Sum256([]byte(name(i)))
				now := time.Now()
				ev := func(seq int64, typ ledger.EventType, data []byte) ledger.Event {
					return ledger.Event{RequestID: id, Seq: seq, Generation: 1, Type: typ, At: now, Data: data}
				}
				rec := &ledger.Record{Identity: "f:" + hex.EncodeToString(sum[:]), RequestID: id, Tenant: "acme", Operation: "chat.completions",
					RequestSHA256: hex.EncodeToString(sum[:]), State: ledger.InProgress, Owner: "o", Generation: 1, LeaseUntil: now.Add(time.Minute), CreatedAt: now}
				evs := []ledger.Event{ev(1, ledger.EvCreated, header), ev(2, ledger.EvReserved, small), ev(3, ledger.EvDispatch, small)}
				existing, created, err := st.Claim(ctx, rec, evs)
				if err != nil {
					b.Error(err)
					return
				}
				if !created {
					ok, err := st.Replace(ctx, existing.RequestID, rec, evs)
					if err != nil || !ok {
						b.Errorf("replace %s: %v %v", existing.RequestID, ok, err)
						return
					}
				}
				if err := st.Finish(ctx, &ledger.Finish{Identity: rec.Identity, RequestID: id, Generation: 1, State: ledger.Succeeded, At: now,
					Response: &ledger.Response{Status: 200, ContentType: "application/json", Attempts: 1, Body: respBody},
					Events:   []ledger.Event{ev(4, ledger.EvObserved, ref), ev(5, ledger.EvDecision, ref), ev(6, ledger.EvTerminal, small[:45])},
					Receipt:  receiptBody, Tenant: "acme", Charge: 1234}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
