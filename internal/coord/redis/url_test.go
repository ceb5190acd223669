package redis

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// Every form of coordination URL, and what each is refused for.
func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		name, url string
		want      string // Target.String(), or the error's text
		mode      Mode
		err       bool
	}{
		{"one server", "redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2", Single, false},
		{"one server, TLS, prefix", "rediss://u:secret@r.example:6380/0?key_prefix=app:", "rediss://r.example:6380/0?key_prefix=app%3A", Single, false},
		{"one server, go-redis option", "redis://127.0.0.1:6379/0?pool_size=4", "redis://127.0.0.1:6379/0", Single, false},
		{"sentinel", "redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26379/1?master_name=mymaster&sentinel_password=s",
			"redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/1?master_name=mymaster", Sentinel, false},
		{"cluster", "redis+cluster://n1:7000,n2:7001,[::1]:7002", "redis+cluster://n1:7000,n2:7001,[::1]:7002", Cluster, false},
		{"cluster, db 0", "rediss+cluster://u:p@n1:7000/0?key_prefix=x:", "rediss+cluster://n1:7000?key_prefix=x%3A", Cluster, false},
		{"unknown scheme", "redis+ring://a:1", `unknown scheme "redis+ring"`, 0, true},
		{"empty prefix", "redis://a:1/0?key_prefix=", "key_prefix is empty", 0, true},
		{"unknown option", "redis+cluster://a:1?pool_sise=3", "unexpected option: pool_sise", 0, true},
		{"a host without its port", "redis+cluster://a:1,b", `host 2 of 2 is "b": want host:port`, 0, true},
		{"a trailing comma", "redis+cluster://a:1,", `host 2 of 2 is "": want host:port`, 0, true},
		{"no host", "redis+sentinel:///0?master_name=m", "no host", 0, true},
		{"sentinel without its master", "redis+sentinel://a:26379/0", "needs master_name", 0, true},
		{"sentinel with a bad db", "redis+sentinel://a:26379/x?master_name=m", "invalid database number", 0, true},
		{"cluster with a db", "redis+cluster://a:1/3", "database 0 only", 0, true},
		{"cluster prefix with a brace", "redis+cluster://a:1?key_prefix={x}:", "no { or }", 0, true},
		{"hosts in addr", "redis+cluster://a:1?addr=b:2", "addr is not an option", 0, true},
		{"credentials in the query", "redis+sentinel://a:1/0?master_name=m&password=x", "password is not an option", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg, err := ParseURL(c.url)
			if c.err {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("ParseURL(%q) = %v, want an error saying %q", c.url, err, c.want)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error shows a password: %v", err)
				}
				return
			}
			if err != nil || tg.String() != c.want || tg.Mode != c.mode {
				t.Fatalf("ParseURL(%q) = %v (%v), %v; want %s (%v)", c.url, tg, tg.Mode, err, c.want, c.mode)
			}
		})
	}
}

// A Sentinel URL's user and password are the servers', as in every other
// Redis URL; the sentinels' own go in sentinel_username and
// sentinel_password (go-redis's failover URL has them the other way
// round).
func TestASentinelURLsCredentials(t *testing.T) {
	tg, err := ParseURL("redis+sentinel://app:pw@s1:26379,s2:26379/3?master_name=m&sentinel_username=su&sentinel_password=sp")
	if err != nil {
		t.Fatal(err)
	}
	o := tg.failover
	if o.Username != "app" || o.Password != "pw" || o.SentinelUsername != "su" || o.SentinelPassword != "sp" ||
		o.MasterName != "m" || o.DB != 3 || strings.Join(o.SentinelAddrs, ",") != "s1:26379,s2:26379" {
		t.Fatalf("%+v", o)
	}
}

// The gateway owns retries: a command whose connection breaks before its
// answer is not sent again by the client (a script sent twice could take
// twice: two tokens, two charges), on every kind of deployment.
func TestACommandIsSentOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var incrs atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go breakOnIncr(conn, &incrs)
		}
	}()
	tg, err := ParseURL("redis://" + ln.Addr().String() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	rdb := tg.newClient()
	defer rdb.Close()
	if err := rdb.Incr(context.Background(), "k").Err(); err == nil {
		t.Fatal("INCR answered by a server that broke the connection")
	}
	if n := incrs.Load(); n != 1 {
		t.Fatalf("INCR was sent %d times, want once", n)
	}
	for _, u := range []string{"redis+sentinel://a:1/0?master_name=m", "redis+cluster://a:1"} {
		tg, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		// No server to break here: the clients' options say it (after
		// go-redis's defaults, where 0 would have meant 3).
		c := tg.newClient()
		retries := 0
		switch c := c.(type) {
		case *goredis.Client:
			retries = c.Options().MaxRetries
		case *goredis.ClusterClient:
			retries = max(0, c.Options().MaxRetries)
		}
		_ = c.Close()
		if retries != 0 {
			t.Fatalf("%s: a command is retried %d times", u, retries)
		}
	}
}

// breakOnIncr answers a RESP client like a server that breaks the
// connection on INCR (counting it) and refuses anything else.
func breakOnIncr(conn net.Conn, incrs *atomic.Int32) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		var n int
		for _, ch := range strings.TrimSpace(line[1:]) {
			n = n*10 + int(ch-'0')
		}
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(arg))
		}
		if strings.EqualFold(args[0], "incr") {
			incrs.Add(1)
			return
		}
		_, _ = conn.Write([]byte("-ERR unknown command\r\n"))
	}
}
