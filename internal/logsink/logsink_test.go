package logsink

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer records the writes the sink made.
type lockedBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes++
	return b.buf.Write(p)
}

func TestEveryLineArrivesWholeAndInOrderPerWriter(t *testing.T) {
	var dst lockedBuffer
	w := New(&dst)
	const writers, lines = 8, 2000
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range lines {
				fmt.Fprintf(w, "writer %d line %d\n", i, j)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(dst.buf.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		var i, j int
		if _, err := fmt.Sscanf(l, "writer %d line %d", &i, &j); err != nil {
			t.Fatalf("torn line %q: %v", l, err)
		}
		if j != next[i] {
			t.Fatalf("writer %d: line %d after %d", i, j, next[i]-1)
		}
		next[i]++
	}
	t.Logf("%d lines in %d writes", len(got), dst.writes)
}

func TestWritesAfterCloseGoStraightThrough(t *testing.T) {
	var dst lockedBuffer
	w := New(&dst)
	fmt.Fprint(w, "before\n")
	_ = w.Close()
	_ = w.Close()
	fmt.Fprint(w, "after\n")
	if got := dst.buf.String(); got != "before\nafter\n" {
		t.Fatalf("got %q", got)
	}
}

// blockingWriter holds every write until released.
type blockingWriter struct {
	release chan struct{}
	lockedBuffer
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	<-b.release
	return b.lockedBuffer.Write(p)
}

func TestAStuckDestinationHoldsWritersBackInsteadOfGrowing(t *testing.T) {
	dst := &blockingWriter{release: make(chan struct{})}
	w := New(dst)
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	wrote := make(chan int)
	go func() {
		n := 0
		for range 4 * maxPending / len(line) {
			_, _ = w.Write(line)
			n++
		}
		wrote <- n
	}()
	// The writer cannot finish while the destination is stuck: at most
	// maxPending (plus one line) waits, and one batch is in the
	// destination's hands.
	w.mu.Lock()
	for len(w.pending) <= maxPending {
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	if len(w.pending) > maxPending+len(line) {
		t.Fatalf("%d bytes pending, bound %d", len(w.pending), maxPending)
	}
	w.mu.Unlock()
	close(dst.release)
	if n := <-wrote; n != 4*maxPending/len(line) {
		t.Fatalf("wrote %d lines", n)
	}
	_ = w.Close()
	if got := dst.buf.Len(); got != 4*maxPending/len(line)*len(line) {
		t.Fatalf("%d bytes arrived, want %d", got, 4*maxPending/len(line)*len(line))
	}
}
