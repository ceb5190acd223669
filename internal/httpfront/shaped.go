// Package httpfront shapes the answers net/http writes on its own, before
// any handler runs (a malformed request line or header, a header block too
// large): JSON in the caller's protocol with x-should-retry, naming what
// was wrong (docs/errors.md).
package httpfront

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/provider"
)

// Listener wraps the gateway's listener so that the few answers
// net/http writes on its own, before any handler runs — a malformed
// request line or header, a header block too large, an unsupported
// transfer encoding, protocol version or Expect — are JSON in the
// caller's protocol with x-should-retry, like every other error, and say
// what was wrong, rather than text/plain (or nothing) that an SDK reports
// with an empty code and message.
type Listener struct{ net.Listener }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &shapedConn{Conn: c}, nil
}

// maxHead bounds the copy a connection keeps of the request head it is
// reading, to name what net/http refused in it.
const maxHead = 16 << 10

// shapedConn keeps a copy of the request head being read — its request
// line and headers, nothing of its body — and rewrites net/http's own
// error answers into JSON that names what was wrong with that head.
// net/http reads and writes a connection from two goroutines (a
// background read watches for the client leaving), hence the lock.
type shapedConn struct {
	net.Conn
	mu sync.Mutex
	// head is the request head read so far; whole once it holds the
	// blank line that ends it (or maxHead bytes): what is read after is
	// a body, not kept. An answer starts the next head.
	head  []byte
	whole bool
}

var (
	anthropicPath = []byte(" /v1/messages")
	// cannedHeaders is what net/http's own error answers carry, and no
	// answer of the gateway's handlers does.
	cannedHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")
	// expectFailed is net/http's answer to an Expect other than
	// 100-continue, which it sends before any handler runs.
	expectFailed = []byte("HTTP/1.1 417 ")
)

func (c *shapedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.keep(p[:n])
	}
	return n, err
}

// keep adds what was read to the head, until the head is whole.
func (c *shapedConn) keep(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.whole {
		return
	}
	from := max(0, len(c.head)-3) // the blank line may straddle two reads
	c.head = append(c.head, p[:min(len(p), maxHead-len(c.head))]...)
	if end := headEnd(c.head[from:]); end >= 0 {
		c.head, c.whole = c.head[:from+end], true
	}
	if len(c.head) >= maxHead {
		c.whole = true
	}
}

// headEnd is the length of the head in b up to and including the blank
// line that ends it (CRLF or bare LF), or -1.
func headEnd(b []byte) int {
	end := -1
	if i := bytes.Index(b, []byte("\n\r\n")); i >= 0 {
		end = i + 3
	}
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 && (end < 0 || i+2 < end) {
		end = i + 2
	}
	return end
}

func (c *shapedConn) Write(p []byte) (int, error) {
	if len(p) < 12 || !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(p)
	}
	// An answer: what is read next is the next request's head.
	c.mu.Lock()
	head := c.head
	if cap(c.head) > 4<<10 {
		c.head = nil // an unusually large head: do not keep its buffer
	} else {
		c.head = c.head[:0:cap(c.head)]
	}
	c.whole = false
	c.mu.Unlock()
	if p[9] != '4' && p[9] != '5' {
		return c.Conn.Write(p)
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil {
		return c.Conn.Write(p)
	}
	text := ""
	if i := bytes.Index(p, cannedHeaders); i >= 0 {
		text = string(p[i+len(cannedHeaders):])
	} else if !bytes.HasPrefix(p, expectFailed) {
		return c.Conn.Write(p) // a handler's own answer
	}
	anthropic := false
	if i := bytes.IndexByte(head, '\n'); i > 0 {
		anthropic = bytes.Contains(head[:i], anthropicPath)
	}
	if _, err := c.Conn.Write(shapedAnswer(status, cannedMessage(status, text, head), anthropic)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// shapedAnswer is the JSON answer for one of net/http's own errors.
func shapedAnswer(status int, msg string, anthropic bool) []byte {
	code := api.CodeInvalidRequest
	if status == http.StatusRequestHeaderFieldsTooLarge {
		code = api.CodeRequestTooLarge
	}
	p := provider.OpenAI
	if anthropic {
		p = provider.Anthropic
	}
	typ := api.ErrorType(code, p)
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
