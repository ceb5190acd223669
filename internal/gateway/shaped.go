package gateway

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/oncegate/oncegate/internal/provider"
)

// shapedListener wraps the gateway's listener so that the few answers
// net/http writes on its own, before any handler runs — a header value
// holding a control byte, a header block too large, a transfer encoding
// it does not support — are JSON in the caller's protocol with
// x-should-retry, like every other error, rather than text/plain that an
// SDK reports with an empty code and message.
type shapedListener struct{ net.Listener }

func (l shapedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &shapedConn{Conn: c}, nil
}

// shapedConn remembers whether the request being read is on the
// Anthropic path, and rewrites net/http's own error answers.
type shapedConn struct {
	net.Conn
	anthropic atomic.Bool
}

var (
	anthropicPath = []byte(" /v1/messages")
	// cannedHeaders is what net/http's own error answers carry, and no
	// answer of the gateway's handlers does.
	cannedHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")
)

func (c *shapedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		// A request that starts a read names its path on its first line.
		line := p[:min(n, 512)]
		if i := bytes.IndexByte(line, '\n'); i > 0 {
			c.anthropic.Store(bytes.Contains(line[:i], anthropicPath))
		}
	}
	return n, err
}

func (c *shapedConn) Write(p []byte) (int, error) {
	if len(p) < 12 || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || (p[9] != '4' && p[9] != '5') {
		return c.Conn.Write(p)
	}
	i := bytes.Index(p, cannedHeaders)
	if i < 0 {
		return c.Conn.Write(p)
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(shapedAnswer(status, string(p[i+len(cannedHeaders):]), c.anthropic.Load())); err != nil {
		return 0, err
	}
	return len(p), nil
}

// shapedAnswer is the JSON answer for one of net/http's own errors, whose
// text is e.g. "400 Bad Request: invalid header value".
func shapedAnswer(status int, text string, anthropic bool) []byte {
	code, msg := CodeInvalidRequest, "the request could not be read ("+text+")"
	switch {
	case status == 400:
		// net/http says no more than "400 Bad Request" for a malformed
		// request line or header; the commonest cause is named.
		msg = "the request's line or headers are malformed: a header value may not hold a control character " +
			"(an Idempotency-Key is 1–255 visible ASCII characters), a header name must be a token"
	case status == 431:
		code, msg = CodeRequestTooLarge, "the request's headers are too large"
	}
	p := provider.OpenAI
	typ := codeStatus[code].typ
	if anthropic {
		p, typ = provider.Anthropic, codeStatus[code].anType
	}
	body := provider.EncodeError(p, &provider.ClientError{Status: status, Type: typ, Code: code, Message: msg})
	out := make([]byte, 0, 160+len(body))
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\nContent-Type: application/json\r\nx-should-retry: false\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}
