package intentlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppend: records of the size of a request's finish (2.5 KB)
// appended by 64 writers at once and by one, with and without a sync per
// group commit; records/flush is how many each group commit carried.
func BenchmarkAppend(b *testing.B) {
	rec := bytes.Repeat([]byte("r"), 2500)
	for _, synced := range []bool{true, false} {
		for _, writers := range []int{64, 1} {
			b.Run(fmt.Sprintf("sync=%v/writers=%d", synced, writers), func(b *testing.B) {
				l, _, err := Open(filepath.Join(b.TempDir(), "intent.log"), Options{Sync: synced}, func([]byte) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				var n atomic.Int64
				var wg sync.WaitGroup
				b.SetBytes(int64(len(rec)))
				b.ResetTimer()
				for range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n.Add(1) <= int64(b.N) {
							if err := l.Append(rec); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if st := l.Stats(); st.Flushes > 0 {
					b.ReportMetric(float64(st.Records)/float64(st.Flushes), "records/flush")
				}
			})
		}
	}
}

// BenchmarkScanTornTail: what a start after a crash pays to tell a torn
// tail from corruption — 2,000 intact frames of 0.3–3.3 KB, then half a
// 60 KB frame, then the 16 MiB of zeros a file is extended with ahead of
// its frames (every offset of the torn half is tried as a frame; its
// bytes are a quarter zeros, so many of them read as lengths reaching
// into the zeros) — and, as a bound, the same with a mebibyte of random
// bytes in place of the torn frame.
func BenchmarkScanTornTail(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := func(n int) []byte {
		out := make([]byte, n)
		for i := range out {
			if rng.IntN(4) != 0 {
				out[i] = byte(rng.IntN(256))
			}
		}
		return out
	}
	log := bytes.Clone(magic)
	for range 2000 {
		log = AppendFrame(log, noise(300+rng.IntN(3000)))
	}
	frame := AppendFrame(nil, noise(60000))
	for _, c := range []struct {
		name string
		tail []byte
	}{{"torn-frame", frame[:len(frame)/2]}, {"random-MiB", noise(1 << 20)}} {
		file := append(append(bytes.Clone(log), c.tail...), make([]byte, 16<<20)...)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(file)))
			for b.Loop() {
				sc, err := scanBytes(file, "bench.log", ScanOptions{}, func([]byte, int64) error { return nil })
				if err != nil || sc.Tail == nil || sc.Err() != nil || sc.Records != 2000 {
					b.Fatalf("%v %+v", err, sc)
				}
			}
		})
	}
}
