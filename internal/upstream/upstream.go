// Package upstream is oncegate's outbound transport: one pooled HTTP client
// per provider, per-phase timeouts (connect, first byte, idle between
// chunks) and typed errors. It performs no retries of its own — the retry
// engine is the single retry owner — it stops net/http from replaying a
// request whose bytes already left, and it follows no redirect: a 3xx, like
// an informational status other than 100 and 103, is an answer outside the
// provider's protocol (docs/architecture.md, docs/errors.md). Establishing
// a connection may try several addresses; that is not an attempt.
package upstream

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
)

// Phase says how far an attempt got before it failed.
type Phase string

// The phases of a failed attempt.
const (
	PhaseConnect Phase = "connect" // no connection: nothing was sent
	// PhaseWrite: the request was being written when the attempt failed;
	// the provider never got all of it, so it cannot have acted on it —
	// short of the instant between the last byte leaving and the
	// transport saying so, which is why a stateful call still reconciles.
	PhaseWrite     Phase = "write"
	PhaseSend      Phase = "send"       // failed after the whole request was sent, before response headers
	PhaseFirstByte Phase = "first_byte" // the request was sent and the provider went silent
	PhaseBody      Phase = "body"       // after response headers
)

// Error is a transport failure of one attempt, or an answer outside the
// provider's protocol.
type Error struct {
	Phase Phase
	// Timeout: the phase's timeout fired (connect, first byte or idle).
	Timeout bool
	// Cancelled: the caller cancelled (client gone, hedge lost).
	Cancelled bool
	// Deadline: the logical request's deadline ended the attempt.
	Deadline bool
	// Status, when set, is the status of an answer that is no answer of
	// the provider's API: a redirect (3xx) or an informational status
	// other than 100 and 103 — a protocol violation, never followed or
	// waited out.
	Status int
	Err    error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("upstream answered outside its protocol: %v", e.Err)
	}
	what := "failed"
	switch {
	case e.Deadline:
		what = "hit the deadline"
	case e.Cancelled:
		what = "cancelled"
	case e.Timeout:
		what = "timed out"
	}
	return fmt.Sprintf("upstream %s %s: %v", e.Phase, what, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Kind classifies a transport failure that happened before any output
// (docs/retries.md) for a stateless operation: connection failures and resets
// before headers are timeout_before_response; a silent provider is a
// first-byte timeout, which moves to the next route.
func (e *Error) Kind() (gw.Kind, gw.Cause) {
	switch {
	case e.Status != 0:
		return gw.KindProtocolViolation, ""
	case errors.Is(e.Err, gw.ErrCredentialRefused):
		return gw.KindAccountRefused, gw.CauseUpstreamAuth // nothing was sent
	case e.Deadline:
		return gw.KindTimeoutBeforeResponse, "" // observed at the deadline: the engine stops
	case e.Cancelled:
		return gw.KindCancelled, gw.CauseClientGone
	case e.Phase == PhaseFirstByte:
		return gw.KindTimeoutBeforeResponse, gw.CauseFirstByteTimeout
	case e.Phase == PhaseBody:
		return gw.KindUnavailable, ""
	}
	// A failure the authentication step classified itself: a credential
	// that cannot be obtained is the route's account refused.
	var k interface{ Kind() (gw.Kind, gw.Cause) }
	if errors.As(e.Err, &k) {
		return k.Kind()
	}
	return gw.KindTimeoutBeforeResponse, ""
}

var (
	errFirstByte = errors.New("no response before the first-byte timeout")
	errIdle      = errors.New("no data before the idle timeout")
	errReplay    = errors.New("oncegate: refusing to resend a request whose bytes already left (no transport retries)")
)

// Config is one provider's transport settings.
type Config struct {
	BaseURL   string
	Connect   time.Duration
	FirstByte time.Duration
	Idle      time.Duration
	// Headers are sent on every request (the user agent, a provider's
	// extra headers).
	Headers http.Header
	// Query holds extra query parameters sent on every request.
	Query url.Values
	// Auth, when set, authenticates every request just before it is sent
	// (a key header, a token, a signature); its error fails the attempt
	// in the connect phase: nothing was sent.
	Auth Authenticator
	// Dial, when set, opens the connections instead of the system's
	// network (tests use an in-memory one); Connect still bounds it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Authenticator adds a provider's credential to a request whose body is
// body (provider.Auth is one).
type Authenticator interface {
	Authenticate(ctx context.Context, req *http.Request, body []byte) error
}

// Client sends attempts to one provider. It is safe for concurrent use.
type Client struct {
	cfg Config
	// tr sends each request once. It is used without an http.Client,
	// whose redirect handling would follow a 307 or 308 by sending the
	// body again — which the no-resend guard refuses, turning a
	// provider's redirect into a send failure that is retried.
	tr *http.Transport
}

// New builds a provider client with its own connection pool.
// Config returns the settings the client was made with.
func (c *Client) Config() Config { return c.cfg }

// New returns a client for one provider.
func New(cfg Config) *Client {
	dialer := &net.Dialer{Timeout: cfg.Connect, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if cfg.Dial != nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if cfg.Connect > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, cfg.Connect)
				defer cancel()
			}
			return cfg.Dial(ctx, network, addr)
		}
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		TLSHandshakeTimeout: cfg.Connect,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		// As many idle connections as a burst of streams opened: each one
		// closed only to be dialled again costs a handshake and new
		// buffers. An idle connection lasts IdleConnTimeout at most.
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   4096,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true, // SSE must not sit in a gzip buffer
		// A provider's headers are untrusted too: bound them.
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &Client{cfg: cfg, tr: tr}
}

// Close releases idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Request is one attempt's outbound request.
type Request struct {
	// Method is POST unless set (GET and DELETE read and edit a stateful
	// upstream's conversations).
	Method string
	Path   string // appended to the base URL, e.g. "/chat/completions"
	Body   []byte
	Header http.Header // per-attempt headers (idempotency key, request id)
}

// Response is an attempt's response. Reads from Body time out after the
// first-byte timeout until data arrives and after the idle timeout between
// reads; Body.Close must be called.
type Response struct {
	Status      int
	Header      http.Header
	Body        io.ReadCloser
	FirstByteAt time.Time
}

// Do sends one attempt and waits for the response headers. It never
// retries. ctx bounds the whole attempt, body included; cancelling it
// aborts the connection, which the provider sees.
func (c *Client) Do(ctx context.Context, r *Request) (*Response, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	b := &onceBody{data: r.Body}
	method := cmp.Or(r.Method, http.MethodPost)
	target := c.cfg.BaseURL + r.Path
	if len(c.cfg.Query) > 0 {
		sep := "?"
		if strings.Contains(r.Path, "?") {
			sep = "&"
		}
		target += sep + c.cfg.Query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		cancel(nil)
		return nil, &Error{Phase: PhaseConnect, Err: err}
	}
	if method == http.MethodPost || len(r.Body) > 0 {
		req.Body, req.GetBody, req.ContentLength = b.open(), b.reopen, int64(len(r.Body))
	}
	if c.cfg.Headers != nil {
		req.Header = c.cfg.Headers.Clone()
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cfg.Auth != nil {
		if err := c.cfg.Auth.Authenticate(ctx, req, r.Body); err != nil {
			cause := context.Cause(ctx)
			cancel(nil)
			if cause != nil {
				// The attempt's deadline or its caller ended the wait.
				return nil, sendError(err, cause, PhaseConnect)
			}
			return nil, &Error{Phase: PhaseConnect, Err: fmt.Errorf("authenticate: %w", err)}
		}
	}

	var wrote atomic.Bool
	var wroteAt atomic.Int64
	fb := &firstByteTimer{t: time.AfterFunc(time.Hour, func() { cancel(errFirstByte) }), armed: true}
	fb.t.Stop()
	trace := &httptrace.ClientTrace{
		// WroteRequest runs on the transport's writer goroutine and may
		// come after the response began: it must never re-arm the timer
		// once the first byte is in.
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err != nil {
				return // not all of it: the provider has no request
			}
			wroteAt.Store(time.Now().UnixNano())
			wrote.Store(true)
			fb.start(c.cfg.FirstByte)
		},
		GotFirstResponseByte: fb.disarm,
		Got1xxResponse:       refuseInformational,
	}
	res, err := c.tr.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	fb.disarm()
	b.release()
	if err == nil && (res.StatusCode < 200 || res.StatusCode/100 == 3) {
		err = outsideProtocol(res)
	}
	if err != nil {
		cause := context.Cause(ctx)
		cancel(nil)
		var op *violation
		if errors.As(err, &op) {
			return nil, &Error{Phase: PhaseBody, Status: op.status, Err: op}
		}
		e := sendError(err, cause, phaseOf(wrote.Load(), b.sent.Load()))
		if at := wroteAt.Load(); e.Phase == PhaseSend && !e.Cancelled && !e.Deadline && at != 0 &&
			time.Since(time.Unix(0, at)) >= silence(c.cfg.FirstByte) {
			// The provider took the request, said nothing for a while and
			// closed: it was silent, as if its first-byte timeout had fired
			// (a silent route stays silent: the next one is tried).
			e.Phase = PhaseFirstByte
		}
		return nil, e
	}
	body := &idleBody{rc: res.Body, cancel: cancel, ctx: ctx, first: c.cfg.FirstByte, idle: c.cfg.Idle}
	return &Response{Status: res.StatusCode, Header: res.Header, Body: body, FirstByteAt: time.Now()}, nil
}

// violation is an answer outside the provider's protocol: a redirect,
// which an API never answers (its base_url may have moved, or a proxy in
// front of it redirects), or an informational status that is neither
// 100 Continue nor 103 Early Hints (which net/http passes over).
type violation struct {
	status   int
	location string
}

func (v *violation) Error() string {
	s := fmt.Sprintf("HTTP %d %s", v.status, http.StatusText(v.status))
	switch {
	case v.status/100 == 1:
		return s + ": an informational status the API does not send"
	case v.location == "":
		return s + " with no Location: a redirect, which the API does not answer (the route's base_url may be wrong)"
	}
	return s + " to " + v.location + ": a redirect, which the API does not answer and the gateway never follows (the route's base_url may be wrong)"
}

// refuseInformational ends an attempt at an informational status net/http
// would otherwise wait past.
func refuseInformational(code int, _ textproto.MIMEHeader) error {
	if code == http.StatusContinue || code == http.StatusEarlyHints {
		return nil
	}
	return &violation{status: code}
}

// outsideProtocol closes a redirect's (or a 101's) response and describes
// it. The Location is given without its query or credentials, which may
// carry tokens.
func outsideProtocol(res *http.Response) error {
	v := &violation{status: res.StatusCode}
	if loc := res.Header.Get("Location"); loc != "" {
		u, err := res.Request.URL.Parse(loc)
		if err != nil {
			v.location = "an unreadable Location"
		} else {
			u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
			v.location = strconv.Quote(clip(u.String(), 200))
		}
	}
	_ = res.Body.Close()
	return v
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// silence is how long a provider must have said nothing before a closed
// connection counts as silence rather than a reset: half the first-byte
// timeout, at most a second.
func silence(firstByte time.Duration) time.Duration {
	if firstByte <= 0 {
		return time.Second
	}
	return min(firstByte/2, time.Second)
}

// firstByteTimer bounds the wait from the request's last byte to the
// response's first; once disarmed it stays off.
type firstByteTimer struct {
	mu    sync.Mutex
	t     *time.Timer
	armed bool
}

func (f *firstByteTimer) start(d time.Duration) {
	f.mu.Lock()
	if f.armed {
		f.t.Reset(d)
	}
	f.mu.Unlock()
}

func (f *firstByteTimer) disarm() {
	f.mu.Lock()
	f.armed = false
	f.t.Stop()
	f.mu.Unlock()
}

// sendError types a failure before response headers, in phase.
func sendError(err, cause error, phase Phase) *Error {
	switch {
	case errors.Is(cause, errFirstByte):
		return &Error{Phase: PhaseFirstByte, Timeout: true, Err: cause}
	case errors.Is(cause, context.DeadlineExceeded):
		return &Error{Phase: phase, Deadline: true, Err: cause}
	case cause != nil:
		return &Error{Phase: phase, Cancelled: true, Err: cause}
	}
	var op *net.OpError
	if phase == PhaseConnect && errors.As(err, &op) && op.Op == "dial" {
		return &Error{Phase: PhaseConnect, Timeout: op.Timeout(), Err: err}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return &Error{Phase: PhaseConnect, Err: err}
	}
	return &Error{Phase: phase, Err: err}
}

// phaseOf is how far a request got: wrote, the transport wrote all of it;
// started, some of its body was read to be written.
func phaseOf(wrote, started bool) Phase {
	switch {
	case wrote:
		return PhaseSend
	case started:
		return PhaseWrite
	}
	return PhaseConnect
}

// onceBody is a request body that net/http may rewind only while none of
// it has been sent. net/http replays a POST carrying an Idempotency-Key
// header on a reused connection that failed after writing; refusing to
// rewind turns that hidden retry into a visible, classified failure.
// Once the exchange has its response the bytes are let go (release): a
// stream may stay open for minutes, and the transport keeps its request,
// body included, until the response's end (docs/performance.md, Memory).
type onceBody struct {
	mu   sync.Mutex
	data []byte
	sent atomic.Bool
}

func (b *onceBody) open() io.ReadCloser {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &onceReader{b: b, rest: b.data}
}

func (b *onceBody) reopen() (io.ReadCloser, error) {
	if b.sent.Load() {
		return nil, errReplay
	}
	return b.open(), nil
}

// release lets the body's bytes go: the transport will not read or
// rewind it again.
func (b *onceBody) release() {
	b.mu.Lock()
	b.data = nil
	b.mu.Unlock()
}

// onceReader reads a onceBody, and drops its bytes when it has read them
// all.
type onceReader struct {
	b    *onceBody
	rest []byte
}

func (o *onceReader) Read(p []byte) (int, error) {
	if len(o.rest) == 0 {
		o.rest = nil
		return 0, io.EOF
	}
	n := copy(p, o.rest)
	o.rest = o.rest[n:]
	if len(o.rest) == 0 {
		o.rest = nil // an empty tail still points into the array
	}
	if n > 0 {
		o.b.sent.Store(true)
	}
	return n, nil
}

func (o *onceReader) Close() error { return nil }

// idleBody times out reads: the first-byte timeout until data arrives,
// then the idle timeout between reads. A timeout cancels the attempt.
type idleBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	first  time.Duration
	idle   time.Duration
	mu     sync.Mutex
	timer  *time.Timer
	got    bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	d, cause := b.idle, errIdle
	if !b.got {
		d, cause = b.first, errFirstByte
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(d, func() { b.cancel(cause) })
	} else {
		b.timer.Reset(d)
	}
	b.mu.Unlock()
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.timer.Stop()
	if n > 0 {
		b.got = true
	}
	b.mu.Unlock()
	if err != nil && err != io.EOF {
		return n, b.bodyError(err)
	}
	return n, err
}

func (b *idleBody) bodyError(err error) error {
	cause := context.Cause(b.ctx)
	switch {
	case errors.Is(cause, errFirstByte):
		if b.got {
			return &Error{Phase: PhaseBody, Timeout: true, Err: errIdle}
		}
		return &Error{Phase: PhaseFirstByte, Timeout: true, Err: cause}
	case errors.Is(cause, errIdle):
		return &Error{Phase: PhaseBody, Timeout: true, Err: cause}
	case errors.Is(cause, context.DeadlineExceeded):
		return &Error{Phase: PhaseBody, Deadline: true, Err: cause}
	case cause != nil:
		return &Error{Phase: PhaseBody, Cancelled: true, Err: cause}
	}
	return &Error{Phase: PhaseBody, Err: err}
}

// Close ends the attempt and releases its connection.
func (b *idleBody) Close() error {
	b.mu.Lock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// ReadAll reads at most limit bytes of r; more is an error.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return data, err
	}
	if int64(len(data)) > limit {
		return data[:limit], ErrTooLarge
	}
	return data, nil
}

// ErrTooLarge reports a response over its byte limit.
var ErrTooLarge = errors.New("upstream response over the byte limit")

// IsTimeout reports whether err is an upstream timeout of any phase.
func IsTimeout(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Timeout
}
