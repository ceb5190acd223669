// Package logsink gathers log lines into few writes. A gateway writes one
// access-log line per request; written one system call each, the lines
// cost as much as a tenth of the request path under load. A Writer hands
// each line to a goroutine that writes everything gathered since its last
// write in one call, so a busy gateway makes one write for many lines and
// an idle one writes each line at once.
//
// The price: a line a Writer has accepted but not yet written is lost if
// the process is killed (SIGKILL) in that instant — a fraction of a
// millisecond of lines. Close writes everything gathered.
package logsink

import (
	"io"
	"sync"
)

// maxPending bounds what waits to be written: past it, Write waits for the
// destination, as a plain write would.
const maxPending = 1 << 20

// Writer is an io.Writer that gathers. It is safe for concurrent use.
type Writer struct {
	dst     io.Writer
	mu      sync.Mutex
	drained sync.Cond // signalled when pending was taken
	pending []byte
	spare   []byte
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// New starts a Writer that writes to dst.
func New(dst io.Writer) *Writer {
	w := &Writer{dst: dst, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.drained.L = &w.mu
	go w.loop()
	return w
}

// Write queues a copy of p. It never fails: a failed write to the
// destination loses those lines, and a log has nowhere to report that.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	for len(w.pending) > maxPending && !w.closed {
		w.drained.Wait()
	}
	if w.closed {
		w.mu.Unlock()
		return w.dst.Write(p)
	}
	w.pending = append(w.pending, p...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default: // the writer is already due to run
	}
	return len(p), nil
}

func (w *Writer) loop() {
	defer close(w.done)
	for range w.wake {
		if w.flush() {
			return
		}
	}
}

// flush writes what is pending; it reports whether the Writer closed.
func (w *Writer) flush() bool {
	w.mu.Lock()
	buf, closed := w.pending, w.closed
	w.pending, w.spare = w.spare[:0], nil
	w.drained.Broadcast()
	w.mu.Unlock()
	if len(buf) > 0 {
		_, _ = w.dst.Write(buf)
	}
	w.mu.Lock()
	if cap(buf) <= maxPending {
		w.spare = buf[:0]
	}
	w.mu.Unlock()
	return closed
}

// Close writes everything gathered and stops the Writer; later writes go
// straight to the destination.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.drained.Broadcast()
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
	return nil
}
