package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestHTTPOverMemnetInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		ln, err := n.Listen("svc.test:80")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Hour) // fake time: returns at once
			_, _ = io.WriteString(w, "hello")
		})}
		go func() { _ = srv.Serve(ln) }()
		tr := &http.Transport{DialContext: n.DialContext}
		c := &http.Client{Transport: tr}
		start := time.Now()
		res, err := c.Get("http://svc.test/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "hello" || time.Since(start) != time.Hour {
			t.Fatalf("%q after %v", b, time.Since(start))
		}
		tr.CloseIdleConnections()
		_ = srv.Close()
		if _, err := n.DialContext(context.Background(), "tcp", "svc.test:80"); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("dial after close: %v", err)
		}
	})
}

func TestListenTwiceFails(t *testing.T) {
	n := New()
	if _, err := n.Listen("a:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Listen("a:1"); err == nil {
		t.Fatal("the address was in use")
	}
	if _, err := n.DialContext(context.Background(), "tcp", "b:1"); err == nil {
		t.Fatal("nothing listens at b:1")
	}
	var l *Listener
	l, _ = n.Listen("c:1")
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}
