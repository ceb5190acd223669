package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

func client(url string) *Client {
	return New(Config{BaseURL: url, Connect: time.Second, FirstByte: 300 * time.Millisecond, Idle: 200 * time.Millisecond})
}

func post(t *testing.T, c *Client, ctx context.Context) (*Response, error) {
	t.Helper()
	h := http.Header{}
	h.Set("Idempotency-Key", "og-test") // the header that makes net/http replay POSTs
	return c.Do(ctx, &Request{Path: "/x", Body: []byte(`{"a":1}`), Header: h})
}

// A request whose bytes reached the server is never sent again, even on a
// reused connection that breaks and with an Idempotency-Key header that
// net/http would otherwise treat as permission to replay.
func TestNoHiddenRetryAfterBytesLeft(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seen.Add(1)
		_, _ = io.ReadAll(r.Body)
		if n == 1 {
			w.WriteHeader(200) // first request: fine, and the connection goes back to the pool
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close() // second request on the reused connection: read, then drop
		}
	}))
	defer srv.Close()
	c := client(srv.URL)
	res, err := post(t, c, context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	_, err = post(t, c, context.Background())
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseSend {
		t.Fatalf("want a send-phase error, got %v", err)
	}
	if k, _ := ue.Kind(); k != gw.KindTimeoutBeforeResponse {
		t.Fatalf("kind %s", k)
	}
	time.Sleep(50 * time.Millisecond) // let a (wrong) replay arrive if one was sent
	if n := seen.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2: the transport retried", n)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a real dead port
	_, err = post(t, client("http://"+addr), context.Background())
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseConnect {
		t.Fatalf("want connect error, got %v", err)
	}
	if k, c := ue.Kind(); k != gw.KindTimeoutBeforeResponse || c != "" {
		t.Fatalf("kind %s/%s", k, c)
	}
}

func TestFirstByteTimeout(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a closed connection only once the body is read
		<-r.Context().Done()      // hang before headers until the client gives up
		close(gone)
	}))
	defer srv.Close()
	_, err := post(t, client(srv.URL), context.Background())
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseFirstByte || !ue.Timeout {
		t.Fatalf("want first-byte timeout, got %v", err)
	}
	if k, c := ue.Kind(); k != gw.KindTimeoutBeforeResponse || c != gw.CauseFirstByteTimeout {
		t.Fatalf("kind %s/%s", k, c)
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the server never saw the disconnect")
	}
}

func TestIdleTimeoutMidBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(200)
		_, _ = w.Write([]byte("data: 1\n\n"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // then stall
	}))
	defer srv.Close()
	res, err := post(t, client(srv.URL), context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseBody || !ue.Timeout {
		t.Fatalf("want idle timeout, got %v", err)
	}
}

func TestSilentBodyIsAFirstByteTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // headers, then nothing at all
	}))
	defer srv.Close()
	res, err := post(t, client(srv.URL), context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, err = io.ReadAll(res.Body)
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseFirstByte {
		t.Fatalf("want first-byte timeout, got %v", err)
	}
}

func TestCancelReachesTheServer(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(gone)
	}))
	defer srv.Close()
	c := New(Config{BaseURL: srv.URL, Connect: time.Second, FirstByte: time.Minute, Idle: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := post(t, c, ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = io.ReadAll(res.Body)
	var ue *Error
	if !errors.As(err, &ue) || !ue.Cancelled {
		t.Fatalf("want cancelled, got %v", err)
	}
	if k, _ := ue.Kind(); k != gw.KindCancelled {
		t.Fatalf("kind %s", k)
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the server never saw the cancellation")
	}
}

func TestDeadlineIsNotACancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := New(Config{BaseURL: srv.URL, Connect: time.Second, FirstByte: time.Minute, Idle: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := post(t, c, ctx)
	var ue *Error
	if !errors.As(err, &ue) || !ue.Deadline {
		t.Fatalf("want deadline, got %v", err)
	}
	if k, _ := ue.Kind(); k != gw.KindTimeoutBeforeResponse {
		t.Fatalf("kind %s", k)
	}
}

// The transport may report the request written after the response began
// (WroteRequest runs on its writer goroutine). A disarmed first-byte timer
// must stay off, or a healthy stream is cut first_byte after it started.
func TestFirstByteTimerStaysOffOnceDisarmed(t *testing.T) {
	fired := make(chan struct{}, 1)
	fb := &firstByteTimer{t: time.AfterFunc(time.Hour, func() { fired <- struct{}{} }), armed: true}
	fb.t.Stop()
	fb.disarm()                     // GotFirstResponseByte, then Do returns …
	fb.start(10 * time.Millisecond) // … and only then WroteRequest
	select {
	case <-fired:
		t.Fatal("a late WroteRequest re-armed the first-byte timer")
	case <-time.After(100 * time.Millisecond):
	}
	armed := &firstByteTimer{t: time.AfterFunc(time.Hour, func() { fired <- struct{}{} }), armed: true}
	armed.start(10 * time.Millisecond)
	select {
	case <-fired:
	case <-time.After(time.Second):
		t.Fatal("an armed timer never fired")
	}
}

// A deadline that cuts an attempt while its request is still being
// written says so (phase write): the provider never got a whole request.
// One that comes after the request was written is a send-phase deadline.
func TestADeadlineWhileWritingIsNotASend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn // never read: the client's writes fill the socket buffers
		}
	}()
	c := New(Config{BaseURL: "http://" + ln.Addr().String(), Connect: time.Second, FirstByte: time.Minute, Idle: time.Minute})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	big := make([]byte, 64<<20) // more than any socket buffer holds
	go func() {
		conn := <-accepted
		defer conn.Close()
		// The writer is blocked on a full buffer: now the deadline.
		buf := make([]byte, 1)
		_, _ = conn.Read(buf)
		cancel(context.DeadlineExceeded)
		<-ctx.Done()
	}()
	_, err = c.Do(ctx, &Request{Path: "/x", Body: big})
	var ue *Error
	if !errors.As(err, &ue) || ue.Phase != PhaseWrite || !ue.Deadline {
		t.Fatalf("want a write-phase deadline, got %#v", err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	c = New(Config{BaseURL: srv.URL, Connect: time.Second, FirstByte: time.Minute, Idle: time.Minute})
	wrote := make(chan struct{})
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	go func() {
		<-wrote
		cancel2(context.DeadlineExceeded)
	}()
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }}
	_, err = c.Do(httptrace.WithClientTrace(ctx2, trace), &Request{Path: "/x", Body: []byte(`{"a":1}`)})
	if !errors.As(err, &ue) || ue.Phase != PhaseSend || !ue.Deadline {
		t.Fatalf("want a send-phase deadline, got %#v", err)
	}
}

// A redirect from a provider is one attempt and a protocol violation,
// whatever its status: never followed (a 307 or 308 would send the body
// again), never turned into a send failure the engine retries. Its
// status and Location (without the query, which may carry a token) are
// in the error.
func TestARedirectIsAViolationNeverFollowed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		location string
		want     string
	}{
		{"307", 307, "/v2/x?sig=secret-token", `HTTP 307 Temporary Redirect to "http://HOST/v2/x"`},
		{"308 elsewhere", 308, "https://elsewhere.example/v1/x", `HTTP 308 Permanent Redirect to "https://elsewhere.example/v1/x"`},
		{"301", 301, "/moved", `HTTP 301 Moved Permanently to "http://HOST/moved"`},
		{"302", 302, "/found", `HTTP 302 Found to "http://HOST/found"`},
		{"303", 303, "/other", `HTTP 303 See Other to "http://HOST/other"`},
		{"302 without Location", 302, "", "HTTP 302 Found with no Location"},
		{"300", 300, "", "HTTP 300 Multiple Choices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Add(1)
				_, _ = io.ReadAll(r.Body)
				if r.URL.Path != "/x" {
					w.WriteHeader(200) // a followed redirect would be answered here
					return
				}
				if tc.location != "" {
					w.Header().Set("Location", tc.location)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			_, err := post(t, client(srv.URL), context.Background())
			var ue *Error
			if !errors.As(err, &ue) || ue.Status != tc.status {
				t.Fatalf("want a violation with status %d, got %v", tc.status, err)
			}
			if k, _ := ue.Kind(); k != gw.KindProtocolViolation {
				t.Fatalf("kind %s", k)
			}
			want := strings.ReplaceAll(tc.want, "HOST", strings.TrimPrefix(srv.URL, "http://"))
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret-token") {
				t.Fatalf("error %q, want it to say %q (and no query)", err, want)
			}
			if n := seen.Load(); n != 1 {
				t.Fatalf("the provider saw %d requests, want 1", n)
			}
		})
	}
}

// An informational status other than 100 and 103 is a violation too:
// net/http would pass over it and wait for a final answer.
func TestAnInformationalStatusIsAViolation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusEarlyHints) // allowed: passed over
		w.WriteHeader(http.StatusProcessing)
		w.WriteHeader(200)
	}))
	defer srv.Close()
	_, err := post(t, client(srv.URL), context.Background())
	var ue *Error
	if !errors.As(err, &ue) || ue.Status != http.StatusProcessing || !strings.Contains(err.Error(), "HTTP 102 Processing") {
		t.Fatalf("want a 102 violation, got %v", err)
	}
	if k, _ := ue.Kind(); k != gw.KindProtocolViolation {
		t.Fatalf("kind %s", k)
	}
}

// A body read to its end and then released holds none of its bytes, and
// is never rewound once any of it was read.
func TestASentBodyLetsItsBytesGo(t *testing.T) {
	b := &onceBody{data: []byte(`{"a":1}`)}
	rc := b.open()
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != `{"a":1}` {
		t.Fatalf("read %q, %v", got, err)
	}
	if r := rc.(*onceReader); r.rest != nil {
		t.Fatal("the reader holds the body after reading it all")
	}
	b.release()
	if b.data != nil {
		t.Fatal("the body holds its bytes after release")
	}
	if _, err := b.reopen(); !errors.Is(err, errReplay) {
		t.Fatalf("rewound after sending: %v", err)
	}
	empty := &onceBody{}
	if n, err := empty.open().Read(make([]byte, 8)); n != 0 || err != io.EOF || empty.sent.Load() {
		t.Fatalf("an empty body: %d, %v, sent %v", n, err, empty.sent.Load())
	}
}
