package intentlog

import (
	"bytes"
	"fmt"
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
