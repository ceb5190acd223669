package httpfront

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/provider"
)

// Before a request reaches its route, the gateway answers what no route
// should see — a request target net/http's router would answer with a
// redirect or an empty page, a body announced larger than the limit — and
// bounds the time its body may take to arrive (docs/api.md, "Limits").
// Every such answer is JSON in the caller's protocol, like every other
// error (docs/errors.md).

// Screen answers a request that cannot reach a route, and puts the
// request's body under the body read timeout (limits.body_read_timeout;
// 0: 30 s). A body announced over maxBody bytes (limits.max_body_bytes)
// is refused before it is read. It reports whether the request goes on
// to its route.
func Screen(w http.ResponseWriter, r *http.Request, maxBody int64, timeout time.Duration) bool {
	p := shapeOf(r)
	rc := http.NewResponseController(w)
	if e := unroutable(r); e != nil {
		refuse(w, rc, e, p)
		return false
	}
	if r.ContentLength == 0 {
		return true // no body
	}
	if n := r.ContentLength; n > maxBody {
		// Refused before a byte of it is read: a client announcing more
		// than the limit is not kept waiting while it uploads.
		refuse(w, rc, api.Errorf(api.CodeRequestTooLarge, "the request body announces %d bytes (Content-Length), more than the %d bytes limits.max_body_bytes allows",
			n, maxBody), p)
		return false
	}
	if timeout <= 0 { // a policy compiled without defaults
		timeout = 30 * time.Second
	}
	// The deadline also bounds what net/http reads of a body a handler
	// left unread (it drains a small one to keep the connection).
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
		r.Body = &timedBody{ReadCloser: r.Body, timeout: timeout, announced: r.ContentLength}
	}
	return true
}

// refuse answers e and closes the connection without reading another
// byte of it: net/http would otherwise drain what it can of the body.
func refuse(w http.ResponseWriter, rc *http.ResponseController, e *api.Error, p provider.Protocol) {
	_ = rc.SetReadDeadline(time.Unix(1, 0))
	w.Header().Set("Connection", "close")
	e.Write(w, p, api.Meta{})
}

// unroutable is the error for a request target no route may serve:
// net/http's router would answer a CONNECT with a text page, an HTTP/2
// preface (PRI * HTTP/2.0) with an empty 400, and a path that is not
// clean (/v1/models/../chat, //, /./) with a redirect to its cleaned form
// and an HTML body. The gateway redirects nothing: a client that sent such
// a path is told what was wrong.
func unroutable(r *http.Request) *api.Error {
	switch {
	case r.Method == http.MethodConnect:
		return api.Errorf(api.CodeMethodNotAllowed, "CONNECT %s: the gateway is not a proxy; send the API's requests to it directly", r.Host)
	case r.Method == "PRI" && r.RequestURI == "*":
		return api.Errorf(api.CodeInvalidRequest, "HTTP/2 with prior knowledge (PRI * HTTP/2.0) is not served: speak HTTP/1.1 to the gateway")
	case r.RequestURI == "*":
		return api.Errorf(api.CodeInvalidRequest, "%s *: the request target * names no endpoint; name a path such as /v1/chat/completions", r.Method)
	}
	if p := r.URL.EscapedPath(); p != cleanPath(p) {
		return api.Errorf(api.CodeInvalidRequest, "the path %q is not in canonical form (it has an empty, `.` or `..` segment); ask for %q — the gateway redirects nothing",
			p, cleanPath(p))
	}
	return nil
}

// cleanPath is p as net/http's router cleans it: rooted, without empty,
// `.` and `..` segments, its trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// shapeOf picks the protocol of an error answered before routing: the
// Anthropic shape on /v1/messages (and below it), else by the headers the
// request carries (api.ProtocolOf).
func shapeOf(r *http.Request) provider.Protocol {
	if p := r.URL.Path; p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/") {
		return provider.Anthropic
	}
	return api.ProtocolOf(r)
}

// timedBody is a request body read under limits.body_read_timeout: a
// read the deadline stopped fails with a *BodyTimeout. Once the body has
// been read to its end, net/http lifts the connection's read deadline as
// it starts watching for the client to leave, so what follows — an
// answer that may stream for minutes — is not bounded by it.
type timedBody struct {
	io.ReadCloser
	timeout   time.Duration
	announced int64 // Content-Length; -1: not announced (chunked)
	read      int64
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if err != nil && err != io.EOF && errors.Is(err, os.ErrDeadlineExceeded) {
		err = &BodyTimeout{after: b.timeout, read: b.read, announced: b.announced}
	}
	return n, err
}

// BodyTimeout is a request body that did not arrive within
// limits.body_read_timeout.
type BodyTimeout struct {
	after     time.Duration
	read      int64
	announced int64
}

// Error says how much of the body came in how long.
func (e *BodyTimeout) Error() string {
	if e.announced < 0 {
		return fmt.Sprintf("the request body did not arrive within %s (limits.body_read_timeout): %d bytes came, and not its end", e.after, e.read)
	}
	return fmt.Sprintf("the request body did not arrive within %s (limits.body_read_timeout): %d of the %d bytes its Content-Length announced came",
		e.after, e.read, e.announced)
}
