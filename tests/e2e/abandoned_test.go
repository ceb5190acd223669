package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// PostgreSQL cut while a stream runs: its owner cannot record an outcome
// and ends its client's stream in band. Once the store answers again,
// every replica gives the same answer for the key at once — 502
// outcome_unknown — not the owner's 409 while its 20 s lease runs, nor
// the broken stream replayed as joined on the others.
func TestAKeyAbandonedInAStoreOutageGetsOneAnswerEverywhere(t *testing.T) {
	f := newFleetWith(t, 3, mock.Config{TTFT: 50 * time.Millisecond, TokenInterval: 50 * time.Millisecond, Tokens: 40}, "", func(f *fleet) {
		f.pg = newProxy(t, f.store)
		f.store = f.pg.url
		f.lease = "{ttl: 20s, renew: 2s}"
	})
	body := chatJSON("chat", "A story through an outage", true, "")
	got, done := make(chan string, 1), make(chan call, 1)
	go func() { done <- stream(f.gws[0], "abandoned", body, got) }()
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream never started")
	}
	f.pg.down()
	owner := <-done
	if !bytes.Contains(owner.body, []byte(`"code":"store_unavailable"`)) || bytes.Contains(owner.body, []byte("[DONE]")) {
		t.Fatalf("the owner's client: want an in-band store_unavailable, got %v", owner)
	}
	f.pg.up()
	within(t, 15*time.Second, "/readyz passing again", func() bool {
		return f.gws[0].ready(t) == 200 && f.gws[1].ready(t) == 200 && f.gws[2].ready(t) == 200
	})
	up := time.Now()
	for _, i := range []int{1, 0, 2, 1} {
		c := send(context.Background(), f.gws[i], apiKey, "abandoned", false, body)
		if c.status != 502 || !bytes.Contains(c.body, []byte("outcome_unknown")) || c.header.Get("x-should-retry") != "false" {
			t.Fatalf("replica %d, %v after the store came back: want 502 outcome_unknown, got %v", i, time.Since(up), c)
		}
		if since := time.Since(up); since > 8*time.Second {
			t.Fatalf("replica %d answered %v after the store came back: it waited for the lease (20 s)", i, since)
		}
	}
	if n := f.primary.Stats().Requests; n != 1 {
		t.Fatalf("the provider saw %d requests", n)
	}
}
