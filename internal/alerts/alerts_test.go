package alerts

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger/memory"
)

func TestSignatureVerifies(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"threshold":0.8}`)
	sig := Sign(secret, body)
	// HMAC-SHA256("s3cret", body), computed apart.
	if !Verify(secret, body, sig) || len(sig) != len("sha256=")+64 || sig[:7] != "sha256=" {
		t.Fatalf("signature %q does not verify", sig)
	}
	for name, c := range map[string]struct {
		secret, body []byte
		sig          string
	}{
		"another secret": {[]byte("other"), body, sig},
		"another body":   {secret, []byte(`{"threshold":1}`), sig},
		"no prefix":      {secret, body, sig[7:]},
		"empty":          {secret, body, ""},
	} {
		if Verify(c.secret, c.body, c.sig) {
			t.Errorf("%s: verified", name)
		}
	}
}

// counts counts webhook results and gauge values.
type counts struct {
	mu     sync.Mutex
	result map[string]int
	ratio  map[string]float64
}

func (c *counts) ObserveBudgetAlert(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.result == nil {
		c.result = map[string]int{}
	}
	c.result[r]++
}

func (c *counts) SetBudgetRatio(scope, id, period string, ratio float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ratio == nil {
		c.ratio = map[string]float64{}
	}
	c.ratio[scope+"/"+id+"/"+period] = ratio
}

func (c *counts) get(r string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result[r]
}

var quiet = slog.New(slog.DiscardHandler)

// A full queue drops the event, counted, without blocking.
func TestWebhookDropsWhenItsQueueIsFull(t *testing.T) {
	c := &counts{}
	h := NewWebhook(WebhookConfig{URL: "http://127.0.0.1:1/hook", Queue: 2, Log: quiet, Count: c})
	for range 5 { // nothing runs the queue
		h.Send(Event{ID: "e"})
	}
	if got := c.get("dropped"); got != 3 {
		t.Fatalf("%d dropped, want 3 of 5 into a queue of 2", got)
	}
}

// A webhook that always fails is tried Tries times, then counted failed.
func TestWebhookGivesUpAfterItsTries(t *testing.T) {
	var mu sync.Mutex
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		tries++
		mu.Unlock()
		w.WriteHeader(502)
	}))
	defer srv.Close()
	c := &counts{}
	h := NewWebhook(WebhookConfig{URL: srv.URL, Secret: []byte("k"), Log: quiet, Count: c, Tries: 3, Backoff: time.Microsecond})
	h.deliver(context.Background(), Event{ID: "e1"})
	mu.Lock()
	defer mu.Unlock()
	if tries != 3 || c.get("failed") != 1 || c.get("sent") != 0 {
		t.Fatalf("%d tries, results %v; want 3 tries and one failed", tries, c.result)
	}
}

// sink collects what a Watcher sends.
type sink struct{ events []Event }

func (s *sink) Send(ev Event) { s.events = append(s.events, ev) }

// The watcher sets the gauge of each budget that is set, and sends each
// threshold once per period and ceiling; a refusal is the 100 % event
// even under the ceiling; a new period sends again; the store keeps what
// was sent across a new watcher (a restart).
func TestWatcherSendsEachCrossingOnce(t *testing.T) {
	var spent gw.NanoUSD
	number := int64(700)
	ceiling := gw.NanoUSD(1000)
	source := func(scope, id string) []Budget {
		if id != "acme" {
			return nil
		}
		return []Budget{{Period: "month", Number: number, Ceiling: ceiling, Charged: func() gw.NanoUSD { return spent }}}
	}
	store := memory.New(0)
	c, s := &counts{}, &sink{}
	w := &Watcher{Source: source, Gauge: c, Once: &StoreOnce{Store: store}, Sender: s, Log: quiet, Now: time.Now}
	step := func(p pendingCheck) { w.recompute(context.Background(), p) }
	thresholds := func() (out []float64) {
		for _, e := range s.events {
			out = append(out, e.Threshold)
		}
		return out
	}
	spent = 500
	step(pendingCheck{scope: "tenant", id: "acme"})
	if c.ratio["tenant/acme/month"] != 0.5 || len(s.events) != 0 {
		t.Fatalf("at half: gauge %v, events %v", c.ratio, s.events)
	}
	spent = 850
	step(pendingCheck{scope: "tenant", id: "acme"})
	step(pendingCheck{scope: "tenant", id: "acme"})
	if got := thresholds(); len(got) != 1 || got[0] != 0.8 {
		t.Fatalf("at 85 %%, twice: %v, want one 0.8", got)
	}
	step(pendingCheck{scope: "tenant", id: "acme", refused: map[string]bool{"month": true}})
	if got := thresholds(); len(got) != 2 || got[1] != 1 {
		t.Fatalf("after a refusal: %v, want 0.8 then 1", got)
	}
	// A restart: a new watcher over the same store sends nothing again.
	w = &Watcher{Source: source, Gauge: c, Once: &StoreOnce{Store: store}, Sender: s, Log: quiet, Now: time.Now}
	spent = 1000
	step(pendingCheck{scope: "tenant", id: "acme"})
	if len(s.events) != 2 {
		t.Fatalf("after a restart: %v", thresholds())
	}
	number++ // next month, spent again past 80 %
	step(pendingCheck{scope: "tenant", id: "acme"})
	if got := thresholds(); len(got) != 4 || got[2] != 0.8 || got[3] != 1 {
		t.Fatalf("a new month: %v", got)
	}
	if s.events[0].ID == s.events[2].ID {
		t.Fatal("two periods' crossings share an id")
	}
}

// Check never blocks and coalesces: Run reads each told budget once.
func TestWatcherRunReadsToldBudgets(t *testing.T) {
	read := make(chan string, 16)
	w := &Watcher{Source: func(scope, id string) []Budget { read <- id; return nil }, Gauge: &counts{}, Log: quiet, Now: time.Now}
	for range 100 {
		w.Check("key", "k1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	if id := <-read; id != "k1" {
		t.Fatalf("read %q", id)
	}
	w.Check("key", "k2")
	if id := <-read; id != "k2" {
		t.Fatalf("read %q, want k2 (k1 was read once)", id)
	}
	cancel()
	<-done
}
