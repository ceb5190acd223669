package httpfront

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestShapedAnswers(t *testing.T) {
	t.Parallel()
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(shapedAnswer(431, cannedMessage(431, "431 Request Header Fields Too Large", nil), true))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 431 || !strings.Contains(string(body), `"type":"error"`) || !strings.Contains(string(body), "headers are too large") {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	// A handler's own answer passes untouched, 4xx or not.
	var out bytes.Buffer
	c := &shapedConn{Conn: writerConn{&out}}
	own := "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n\r\n{}"
	if _, err := c.Write([]byte(own)); err != nil || out.String() != own {
		t.Fatalf("rewrote a handler's answer: %q", out.String())
	}
}

// writerConn is a net.Conn that only writes, to w.
type writerConn struct{ w io.Writer }

func (c writerConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c writerConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c writerConn) Close() error                     { return nil }
func (c writerConn) LocalAddr() net.Addr              { return nil }
func (c writerConn) RemoteAddr() net.Addr             { return nil }
func (c writerConn) SetDeadline(time.Time) error      { return nil }
func (c writerConn) SetReadDeadline(time.Time) error  { return nil }
func (c writerConn) SetWriteDeadline(time.Time) error { return nil }
