package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/mock"
)

// load keeps keyed requests flowing through a fleet — each sent to two
// replicas at once — and records every answer by key.
type load struct {
	f       *fleet
	mu      sync.Mutex
	answers map[string][]stamped
	bodies  map[string]string
	stop    chan struct{}
	wg      sync.WaitGroup
}

// stamped is an answer and when it came.
type stamped struct {
	call
	at time.Time
}

func startLoad(f *fleet, workers int, prefix string) *load {
	l := &load{f: f, answers: map[string][]stamped{}, bodies: map[string]string{}, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				body := chatJSON("chat", "Under load: "+key, i%2 == 1, "")
				l.mu.Lock()
				l.bodies[key] = body
				l.mu.Unlock()
				var both sync.WaitGroup
				for c := range 2 {
					both.Add(1)
					go func() {
						defer both.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						ans := send(ctx, f.gws[(w+i+c)%len(f.gws)], apiKey, key, false, body)
						l.mu.Lock()
						l.answers[key] = append(l.answers[key], stamped{ans, time.Now()})
						l.mu.Unlock()
					}()
				}
				both.Wait()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return l
}

// acked returns a key whose answer was acknowledged, with its body and
// the answer.
func (l *load) acked() (key, body string, ans call, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, as := range l.answers {
		for _, a := range as {
			if a.status == 200 && errorCode(a.call) == "" {
				return k, l.bodies[k], a.call, true
			}
		}
	}
	return "", "", call{}, false
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// errorCode is the code of an error answer, or of a stream's in-band
// error; "" for an answer.
func errorCode(c call) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if c.status != 200 {
		_ = json.Unmarshal(c.body, &e)
		return e.Error.Code
	}
	for _, line := range bytes.Split(c.body, []byte("\n")) {
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && bytes.HasPrefix(data, []byte(`{"error"`)) {
			_ = json.Unmarshal(data, &e)
			return e.Error.Code
		}
	}
	return ""
}

// check asserts what a fleet promises through an outage: no duplicate
// generation (a key's answers agree, and each request reached the
// provider once), only clear errors, every acknowledged answer replayed
// afterwards; it returns the counts of each error code, and when the
// last refusal and the first answer after down were seen.
func (l *load) check(t *testing.T, down, up time.Time) (codes map[string]int, servedAfter int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	codes = map[string]int{}
	idKey := map[string]string{}
	acked := map[string]call{}
	for key, answers := range l.answers {
		for _, a := range answers {
			if a.err != nil {
				t.Fatalf("%s: %v", key, a.err)
			}
			if id := a.header.Get("X-Oncegate-Request-Id"); id != "" {
				if other, ok := idKey[id]; ok && other != key {
					t.Fatalf("request %s answered keys %s and %s", id, other, key)
				}
				idKey[id] = key
			}
			code := errorCode(a.call)
			switch {
			case a.status == 200 && code == "":
				if prev, ok := acked[key]; ok && !bytes.Equal(prev.body, a.body) {
					t.Fatalf("%s: two different answers:\n%s\n%s", key, prev.body, a.body)
				}
				acked[key] = a.call
				if a.at.After(up) {
					servedAfter++
				}
				continue
			}
			codes[code]++
			want := map[string]string{"coordination_unavailable": "true", "store_unavailable": "", "outcome_unknown": "false", "idempotency_key_in_use": "true"}
			retry, ok := want[code]
			if !ok || (retry != "" && a.header.Get("x-should-retry") != retry) {
				t.Fatalf("%s: an unclear error: %v (x-should-retry %q)", key, a.call, a.header.Get("x-should-retry"))
			}
			if code == "coordination_unavailable" && a.at.Before(down) {
				t.Fatalf("%s: coordination_unavailable before the outage: %v", key, a.call)
			}
		}
	}
	// Each request reached the provider at most once, and each belongs to
	// one key: no key was generated twice.
	keyIDs := map[string]int{}
	for id, c := range l.f.primary.Stats().ByRequestID {
		if c.Requests != 1 {
			t.Fatalf("request %s reached the provider %d times", id, c.Requests)
		}
		key, ok := idKey[id]
		if !ok {
			t.Fatalf("request %s reached the provider, yet no client heard of it", id)
		}
		if keyIDs[key]++; keyIDs[key] > 1 {
			t.Fatalf("key %s was generated twice", key)
		}
	}
	// Nothing acknowledged is lost.
	n := 0
	for key, a := range acked {
		if n++; n%7 != 0 {
			continue
		}
		again := send(context.Background(), l.f.gws[n%len(l.f.gws)], apiKey, key, false, l.bodies[key])
		// Replayed from the store — or, right after an outage, "joined":
		// the owner committed the answer before it was acknowledged, but
		// the release of its claim in Redis goes with a later pipeline, so
		// an arrival may still find the claim and get the same committed
		// answer through it. Either way the same bytes, and no new call
		// (checked above).
		dedup := again.header.Get("X-Oncegate-Dedup")
		if again.status != 200 || (dedup != "replayed" && dedup != "joined") || !bytes.Equal(again.body, a.body) {
			t.Fatalf("acknowledged %s asked again: %v", key, again)
		}
	}
	t.Logf("%d keys, %d acknowledged, errors %v, %d answers after the outage", len(l.answers), len(acked), codes, servedAfter)
	return codes, servedAfter
}

// ready reports a replica's /readyz status.
func (g *gateway) ready(t *testing.T) int {
	t.Helper()
	res, err := http.Get(g.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// Redis restarted under load: while it is down new requests are refused
// with 503 coordination_unavailable and /readyz fails; requests in flight
// finish; no request is generated twice, nothing acknowledged is lost,
// and service resumes by itself.
func TestRedisRestartedUnderLoad(t *testing.T) {
	srv := redistest.NewServer(t)
	f := newFleetOn(t, 3, mock.Config{TTFT: 20 * time.Millisecond, Tokens: 8}, "", srv.URL())
	l := startLoad(f, 8, "redis")
	time.Sleep(time.Second)
	down := time.Now()
	srv.Stop()
	within(t, 5*time.Second, "/readyz failing while Redis is down", func() bool { return f.gws[0].ready(t) == 503 })
	// Finished requests are still replayed from the store.
	key, body, ans, ok := l.acked()
	if !ok {
		t.Fatal("nothing was acknowledged before the outage")
	}
	if again := send(context.Background(), f.gws[2], apiKey, key, false, body); again.status != 200 ||
		again.header.Get("X-Oncegate-Dedup") != "replayed" || !bytes.Equal(again.body, ans.body) {
		t.Fatalf("a finished request asked again while Redis is down: %v", again)
	}
	time.Sleep(time.Second)
	srv.Start()
	up := time.Now()
	within(t, 15*time.Second, "/readyz passing again", func() bool { return f.gws[0].ready(t) == 200 && f.gws[2].ready(t) == 200 })
	time.Sleep(time.Second)
	l.end()
	codes, after := l.check(t, down, up)
	if codes["coordination_unavailable"] == 0 || after == 0 {
		t.Fatalf("want refusals while Redis was down and answers after: %v, %d after", codes, after)
	}
}

// PostgreSQL restarted under load (every connection cut, new ones refused
// for a while — through a proxy, so that the tests sharing the server go
// on): 503 store_unavailable while it is down, no request generated
// twice, nothing acknowledged lost, service resumes by itself.
func TestPostgresRestartedUnderLoad(t *testing.T) {
	f := newFleetWith(t, 3, mock.Config{TTFT: 20 * time.Millisecond, Tokens: 8}, "", func(f *fleet) {
		f.pg = newProxy(t, f.store)
		f.store = f.pg.url
	})
	l := startLoad(f, 8, "pg")
	time.Sleep(time.Second)
	down := time.Now()
	f.pg.down()
	within(t, 5*time.Second, "/readyz failing while PostgreSQL is down", func() bool { return f.gws[1].ready(t) == 503 })
	time.Sleep(time.Second)
	f.pg.up()
	up := time.Now()
	within(t, 15*time.Second, "/readyz passing again", func() bool { return f.gws[0].ready(t) == 200 && f.gws[1].ready(t) == 200 })
	time.Sleep(time.Second)
	l.end()
	codes, after := l.check(t, down, up)
	if codes["store_unavailable"] == 0 || after == 0 {
		t.Fatalf("want refusals while PostgreSQL was down and answers after: %v, %d after", codes, after)
	}
}

// proxy forwards TCP connections to a PostgreSQL server; down cuts every
// connection and refuses new ones, as a restarting server does; up
// accepts again on the same port.
type proxy struct {
	t      *testing.T
	target string
	url    string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

// newProxy proxies the server of a postgres:// URL; p.url is the same URL
// through the proxy.
func newProxy(t *testing.T, pgURL string) *proxy {
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: u.Host, conns: map[net.Conn]bool{}}
	p.listen("127.0.0.1:0")
	p.addr = p.ln.Addr().String()
	u.Host = p.addr
	p.url = u.String()
	t.Cleanup(p.down)
	return p
}

func (p *proxy) listen(addr string) {
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment after down
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
}

func (p *proxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	_, _ = io.Copy(c, s)
	_ = c.Close()
}

func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *proxy) up() { p.listen(p.addr) }
