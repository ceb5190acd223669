package oncegate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// inProcess is an http.RoundTripper that hands each request to the
// gateway's handler in this process. The handler runs in a goroutine of
// its own and writes into a pipe the response's body reads from, so a
// stream reaches the caller as it is written; closing the body early, or
// the request's context ending, cancels the handler's context as a
// closed connection would.
type inProcess struct {
	h   http.Handler
	key string
	// running counts the handlers in flight, which cut cancels.
	running *handlers
}

// handlers are the in-process requests being served: Close cuts those
// still running after the drain, and waits for them to return.
type handlers struct {
	mu      sync.Mutex
	cancels map[*context.CancelFunc]struct{}
	wg      sync.WaitGroup
}

func (hs *handlers) add(cancel *context.CancelFunc) {
	hs.mu.Lock()
	if hs.cancels == nil {
		hs.cancels = map[*context.CancelFunc]struct{}{}
	}
	hs.cancels[cancel] = struct{}{}
	hs.wg.Add(1)
	hs.mu.Unlock()
}

func (hs *handlers) done(cancel *context.CancelFunc) {
	hs.mu.Lock()
	delete(hs.cancels, cancel)
	hs.mu.Unlock()
	hs.wg.Done()
}

// cut cancels every handler still running and waits until each returned.
func (hs *handlers) cut() {
	hs.mu.Lock()
	for c := range hs.cancels {
		(*c)()
	}
	hs.mu.Unlock()
	hs.wg.Wait()
}

// RoundTrip serves req in process.
func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	in := req.Clone(ctx)
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "in-process"
	if in.Host == "" {
		in.Host = req.URL.Host
	}
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/1.1", 1, 1
	// The client's key is the one this transport was made with, whatever
	// an SDK read from its own environment.
	in.Header.Del("x-api-key")
	in.Header.Del("api-key")
	in.Header.Set("Authorization", "Bearer "+t.key)
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, buf: bufio.NewWriterSize(pw, 4096), head: make(chan *http.Response, 1), req: req}
	t.running.add(&cancel)
	go func() {
		defer t.running.done(&cancel)
		defer cancel()
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				// A handler's panic reaches no client as a panic: the
				// caller's read ends with an error naming it.
				w.fail(fmt.Errorf("oncegate: the gateway's handler panicked: %v", p))
				return
			}
			w.finish()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case res := <-w.head:
		res.Body = &body{PipeReader: pr, cancel: cancel}
		return res, nil
	case <-req.Context().Done():
		cancel()
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
}

// body is a response's body: closing it cancels the handler, which
// writes no more into the pipe.
type body struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *body) Close() error {
	b.cancel()
	return b.PipeReader.CloseWithError(errors.New("oncegate: response body closed"))
}

// pipeWriter is the handler's http.ResponseWriter: the head goes to
// RoundTrip at the first write, flush or end; the body into the pipe,
// gathered as net/http gathers it (4 KB, or until the handler flushes):
// each write through the pipe waits for the reader, so small writes one
// by one would cost a switch of goroutines each.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	buf    *bufio.Writer
	head   chan *http.Response
	req    *http.Request
	sent   bool
	status int
}

func (w *pipeWriter) Header() http.Header { return w.header }

// WriteHeader sends the head, once; informational (1xx) heads are not
// passed on.
func (w *pipeWriter) WriteHeader(status int) {
	if w.sent || status < 200 {
		return
	}
	w.sent, w.status = true, status
	h := w.header.Clone()
	res := &http.Response{Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Request: w.req, ContentLength: -1}
	if cl, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
		res.ContentLength = cl
	}
	w.head <- res
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	return w.buf.Write(p)
}

// Flush sends the head if it was not, and what was written since the
// last flush.
func (w *pipeWriter) Flush() {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	_ = w.buf.Flush()
}

// FlushError is Flush reporting a reader that went away (for
// http.ResponseController).
func (w *pipeWriter) FlushError() error {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	return w.buf.Flush()
}

// finish ends the body once the handler returned.
func (w *pipeWriter) finish() {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	if err := w.buf.Flush(); err != nil {
		return // the reader went away: the pipe is closed
	}
	_ = w.pw.Close()
}

// fail ends the exchange with err: the caller's RoundTrip or its read of
// the body returns it.
func (w *pipeWriter) fail(err error) {
	if !w.sent {
		w.WriteHeader(http.StatusInternalServerError)
	}
	_ = w.pw.CloseWithError(err)
}
