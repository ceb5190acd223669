package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
)

// rawConn is a client connection to the gateway's listener that writes
// bytes as a test scripts them — what no HTTP client library sends.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	// background: write in the background (an in-memory connection's
	// writes wait for the reader; a large one may outlast the reading).
	background bool
}

// dialRaw connects to the gateway of e (over the in-memory network in a
// bubble). A deadline far beyond any wait a test expects keeps a gateway
// that never answers from hanging the test; it is a safety net, not a
// measurement.
func dialRaw(t *testing.T, e *env) *rawConn {
	t.Helper()
	var conn net.Conn
	var err error
	if e.mem != nil {
		conn, err = e.mem.DialContext(context.Background(), "tcp", "gateway.test:80")
	} else {
		conn, err = net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Minute))
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn), background: e.mem != nil}
}

// write sends s: in the background on an in-memory connection, or for a
// request larger than the gateway reads, where a gateway that stops
// reading would leave it waiting.
func (c *rawConn) write(s string) {
	c.t.Helper()
	if c.background || len(s) > 1<<16 {
		go func() { _, _ = c.conn.Write([]byte(s)) }()
		return
	}
	if _, err := c.conn.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads one response and its body.
func (c *rawConn) answer() (*http.Response, []byte) {
	c.t.Helper()
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("no answer: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("answer's body: %v", err)
	}
	return res, body
}

// closed reports whether the gateway closed the connection (rather than
// leaving it open, which the safety deadline would end).
func (c *rawConn) closed() bool {
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF)
}

// wantError checks an answer is the JSON error of a protocol with a code
// (OpenAI shape, or Anthropic shape when anthropic) whose message holds
// each of want.
func wantError(t *testing.T, res *http.Response, body []byte, status int, anthropic bool, code string, want ...string) {
	t.Helper()
	var eb struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || res.StatusCode != status || res.Header.Get("Content-Type") != "application/json" ||
		res.Header.Get("x-should-retry") != "false" || eb.Error.Code != code || (eb.Type == "error") != anthropic {
		t.Fatalf("want %d %s (anthropic shape %v), got %d %v\n%s", status, code, anthropic, res.StatusCode, res.Header, body)
	}
	for _, w := range want {
		if !strings.Contains(eb.Error.Message, w) {
			t.Fatalf("the message %q does not say %q", eb.Error.Message, w)
		}
	}
}

const bodyTimeoutYAML = "limits: {body_read_timeout: 300ms}\n"

// A client that sends its headers and part of its body, then nothing, is
// answered 408 request_timeout in its protocol once limits.body_read_timeout
// has passed, and its connection is closed: a stalled upload holds no
// connection longer than that.
func TestAStalledBodyIsAnswered408(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, mock.Config{Tokens: 4}, bodyTimeoutYAML, nil)
	body := `{"model":"chat","messages":[{"role":"user","content":"What is it?"}]}`
	part := "10 of the " + strconv.Itoa(len(body)) + " bytes"
	for _, tc := range []struct {
		name, path, auth, framing, part string
		anthropic                       bool
		want                            string
	}{
		{"OpenAI, Content-Length", "/v1/chat/completions", "Authorization: Bearer " + keyAcme, "Content-Length: " + strconv.Itoa(len(body)), body[:10], false, part},
		{"Anthropic, Content-Length", "/v1/messages", "x-api-key: " + keyAcme, "Content-Length: " + strconv.Itoa(len(body)), body[:10], true, part},
		{"OpenAI, chunked", "/v1/chat/completions", "Authorization: Bearer " + keyAcme, "Transfer-Encoding: chunked", "a\r\n" + body[:10] + "\r\n", false, "10 bytes came"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, e)
			c.write("POST " + tc.path + " HTTP/1.1\r\nHost: gateway\r\n" + tc.auth + "\r\n" + tc.framing + "\r\n\r\n" + tc.part)
			res, got := c.answer() // waits for the gateway: nothing more is sent
			wantError(t, res, got, 408, tc.anthropic, api.CodeRequestTimeout, "limits.body_read_timeout", tc.want)
			if !c.closed() {
				t.Fatal("the connection stayed open after the 408")
			}
		})
	}
	if n := e.primary.Stats().Requests; n != 0 {
		t.Fatalf("%d upstream calls for requests whose bodies never came", n)
	}
}

// A Content-Length over limits.max_body_bytes is refused with 413 before
// any of the body is read: the client, which sends none of it, is
// answered.
func TestAnAnnouncedBodyOverTheLimitIsRefusedBeforeItIsRead(t *testing.T) {
	t.Parallel()
	// A body timeout longer than the test's safety net: only the announced
	// length can answer.
	e := newEnvWith(t, mock.Config{Tokens: 4}, "limits: {max_body_bytes: 1000, body_read_timeout: 1h}\n", nil)
	for _, tc := range []struct {
		path, auth string
		anthropic  bool
	}{
		{"/v1/chat/completions", "Authorization: Bearer " + keyAcme, false},
		{"/v1/messages", "x-api-key: " + keyAcme, true},
	} {
		c := dialRaw(t, e)
		c.write("POST " + tc.path + " HTTP/1.1\r\nHost: gateway\r\n" + tc.auth + "\r\nContent-Length: 1001\r\n\r\n")
		res, body := c.answer()
		wantError(t, res, body, 413, tc.anthropic, api.CodeRequestTooLarge, "announces 1001 bytes", "the 1000 bytes limits.max_body_bytes allows")
		if !c.closed() {
			t.Fatal("the connection stayed open after the 413")
		}
	}
}

// The body's deadline ends with the body: an answer streamed for longer
// than limits.body_read_timeout arrives whole.
func TestTheBodyDeadlineEndsWithTheBody(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, mock.Config{Tokens: 8, TokenInterval: 100 * time.Millisecond}, bodyTimeoutYAML, nil)
	body := chatBody("chat", true)
	c := dialRaw(t, e)
	c.write("POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + keyAcme +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	res, got := c.answer()
	if res.StatusCode != 200 || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
		t.Fatalf("%d %s", res.StatusCode, got)
	}
	// The connection carries the next request too.
	c.write("GET /v1/models HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + keyAcme + "\r\n\r\n")
	if res, got := c.answer(); res.StatusCode != 200 {
		t.Fatalf("the next request: %d %s", res.StatusCode, got)
	}
}

// Every answer the gateway gives a malformed request is JSON in the
// caller's protocol, with a message naming what was wrong — also where
// net/http answers on its own before any handler runs (an empty 400, a
// text/plain one saying only "Bad Request", a 417 with no body) and where
// its router would redirect an unclean path with an HTML page.
func TestEveryAnswerBeforeRoutingIsJSONAndNamesTheFault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mock.Config{Tokens: 4})
	const auth = "Authorization: Bearer " + keyAcme + "\r\n"
	const chat = "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n" + auth
	const messages = "POST /v1/messages HTTP/1.1\r\nHost: gateway\r\nx-api-key: " + keyAcme + "\r\n"
	for _, tc := range []struct {
		name, request string
		status        int
		anthropic     bool
		code, want    string
	}{
		{"a path with ..", "GET /v1/models/../chat HTTP/1.1\r\nHost: gateway\r\n" + auth + "\r\n", 400, false, api.CodeInvalidRequest, `"/v1/models/../chat" is not in canonical form`},
		{"a path with //", "GET /v1//models HTTP/1.1\r\nHost: gateway\r\n" + auth + "\r\n", 400, false, api.CodeInvalidRequest, `ask for "/v1/models"`},
		{"a path with .., on Messages", "POST /v1/messages/./count_tokens HTTP/1.1\r\nHost: gateway\r\n\r\n", 400, true, api.CodeInvalidRequest, "not in canonical form"},
		{"HTTP/2 with prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, false, api.CodeInvalidRequest, "HTTP/2 with prior knowledge"},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405, false, api.CodeMethodNotAllowed, "not a proxy"},
		{"two different Content-Lengths", chat + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, false, api.CodeInvalidRequest, "invalid Content-Length: 2 headers with different values (2, 3)"},
		{"two different Content-Lengths, on Messages", messages + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, true, api.CodeInvalidRequest, "invalid Content-Length"},
		{"a negative Content-Length", chat + "Content-Length: -2\r\n\r\n{}", 400, false, api.CodeInvalidRequest, `invalid Content-Length "-2"`},
		{"a Content-Length that is no number", chat + "Content-Length: two\r\n\r\n{}", 400, false, api.CodeInvalidRequest, `invalid Content-Length "two"`},
		{"a control byte in Idempotency-Key", chat + "Idempotency-Key: ab\x01cd\r\nContent-Length: 2\r\n\r\n{}", 400, false, api.CodeInvalidRequest, "Idempotency-Key holds a control character (byte 0x01)"},
		{"a header name with a space", chat + "Idempotency Key: k\r\nContent-Length: 2\r\n\r\n{}", 400, false, api.CodeInvalidRequest, `invalid header name "Idempotency Key"`},
		{"no Host", "GET /v1/models HTTP/1.1\r\n" + auth + "\r\n", 400, false, api.CodeInvalidRequest, "missing Host header"},
		{"two Hosts", "GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n" + auth + "\r\n", 400, false, api.CodeInvalidRequest, "more than one Host header"},
		{"a malformed request line", "GET  /v1/models  HTTP/1.1\r\nHost: gateway\r\n\r\n", 400, false, api.CodeInvalidRequest, "malformed request line"},
		{"a bad escape in the target", "GET /v1/models/%zz HTTP/1.1\r\nHost: gateway\r\n\r\n", 400, false, api.CodeInvalidRequest, `invalid request target "/v1/models/%zz"`},
		{"an unknown Expect", chat + "Expect: telepathy\r\nContent-Length: 2\r\n\r\n{}", 417, false, api.CodeInvalidRequest, `unsupported Expect "telepathy"`},
		{"an unknown transfer encoding", chat + "Transfer-Encoding: gzip\r\n\r\n", 501, false, api.CodeInvalidRequest, `unsupported Transfer-Encoding "gzip"`},
		{"HTTP/3 on an HTTP/1 connection", "GET /v1/models HTTP/3.0\r\nHost: gateway\r\n\r\n", 505, false, api.CodeInvalidRequest, `unsupported protocol version "HTTP/3.0"`},
		{"headers too large", "GET /v1/models HTTP/1.1\r\nHost: gateway\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", 431, false, api.CodeRequestTooLarge, "headers are too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, e)
			c.write(tc.request)
			res, body := c.answer()
			wantError(t, res, body, tc.status, tc.anthropic, tc.code, tc.want)
		})
	}
	// A malformed request after a good one on the same connection is
	// named too: each request's head is read afresh.
	c := dialRaw(t, e)
	c.write("GET /v1/models HTTP/1.1\r\nHost: gateway\r\n" + auth + "\r\n")
	if res, body := c.answer(); res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	c.write(chat + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n{}")
	res, body := c.answer()
	wantError(t, res, body, 400, false, api.CodeInvalidRequest, "invalid Content-Length: 2 headers with different values (5, 6)")
	if n := e.primary.Stats().Requests; n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
}
