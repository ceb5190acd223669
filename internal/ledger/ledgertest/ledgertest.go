// Package ledgertest is the conformance suite every ledger backend must
// pass unchanged: the executable form of "every backend is compatible".
package ledgertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/oncegate/oncegate/internal/ledger"
)

// Opener opens the backend under test. reopen says to open the same
// storage as the previous call (a restart); otherwise fresh storage.
type Opener func(t *testing.T, reopen bool) ledger.Store

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func rec(identity, requestID string) *ledger.Record {
	return &ledger.Record{Identity: identity, RequestID: requestID, Tenant: "acme", Operation: "chat.completions",
		RequestSHA256: "sha-" + requestID, State: ledger.InProgress, Owner: "owner-1", Generation: 1,
		LeaseUntil: t0.Add(30 * time.Second), CreatedAt: t0}
}

func ev(requestID string, seq, gen int64, typ ledger.EventType) ledger.Event {
	return ledger.Event{RequestID: requestID, Seq: seq, Generation: gen, Type: typ, At: t0.Add(time.Duration(seq) * time.Millisecond),
		Data: []byte(fmt.Sprintf(`{"seq":%d}`, seq))}
}

func finish(requestID string, gen, seq int64) *ledger.Finish {
	return &ledger.Finish{Identity: "k:" + requestID, RequestID: requestID, Generation: gen, State: ledger.Succeeded,
		Response: &ledger.Response{Status: 200, ContentType: "application/json", Body: []byte(`{"ok":true}`), Attempts: 1},
		At:       t0.Add(time.Second), Events: []ledger.Event{ev(requestID, seq, gen, ledger.EvTerminal)},
		Receipt: []byte(`{"request_id":"` + requestID + `"}`), Tenant: "acme"}
}

// Run runs the suite.
func Run(t *testing.T, open Opener) {
	ctx := context.Background()
	runTurns(t, open)
	runKeys(t, open)
	runTenants(t, open)
	runRetention(t, open)
	runSpend(t, open)
	t.Run("claim creates once", func(t *testing.T) {
		s := open(t, false)
		got, created, err := s.Claim(ctx, rec("k:a", "r1"), []ledger.Event{ev("r1", 1, 1, ledger.EvCreated)})
		if err != nil || !created || got != nil {
			t.Fatalf("first claim: %v %v %v", got, created, err)
		}
		got, created, err = s.Claim(ctx, rec("k:a", "r2"), []ledger.Event{ev("r2", 1, 1, ledger.EvCreated)})
		if err != nil || created || got == nil || got.RequestID != "r1" || got.State != ledger.InProgress || !got.Keyed() {
			t.Fatalf("second claim: %+v %v %v", got, created, err)
		}
		if evs, _ := s.Events(ctx, "r2"); len(evs) != 0 {
			t.Fatal("a losing claim wrote events")
		}
		if r, err := s.Get(ctx, "k:a"); err != nil || r.RequestID != "r1" || !r.CreatedAt.Equal(t0) {
			t.Fatalf("get: %+v %v", r, err)
		}
		if _, err := s.Get(ctx, "k:none"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
	})
	t.Run("concurrent claims: exactly one wins", func(t *testing.T) {
		s := open(t, false)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("c%d", i)
				_, created, err := s.Claim(ctx, rec("k:same", id), []ledger.Event{ev(id, 1, 1, ledger.EvCreated)})
				if err != nil {
					t.Error(err)
				}
				if created {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d claims won", wins)
		}
	})
	t.Run("events are ordered and fenced", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.Claim(ctx, rec("k:e", "re"), []ledger.Event{ev("re", 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, true, ev("re", 2, 1, ledger.EvReserved), ev("re", 3, 1, ledger.EvDispatch)); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, false, ev("re", 4, 1, ledger.EvObserved)); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, true, ev("re", 4, 1, ledger.EvObserved)); err == nil {
			t.Fatal("a duplicate sequence number was accepted")
		}
		if err := s.Append(ctx, true, ev("re", 5, 7, ledger.EvDecision)); !errors.Is(err, ledger.ErrStaleGeneration) {
			t.Fatalf("wrong generation: %v", err)
		}
		evs, err := s.Events(ctx, "re")
		if err != nil || len(evs) != 4 {
			t.Fatalf("events %v %v", evs, err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || !bytes.Equal(e.Data, []byte(fmt.Sprintf(`{"seq":%d}`, i+1))) || !e.At.Equal(t0.Add(time.Duration(i+1)*time.Millisecond)) {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
	})
	t.Run("a caller's writes commit in the order it made them", func(t *testing.T) {
		// Fire-and-forget events, then a finish that waits: under load
		// and alone, the finish never overtakes them (they would be
		// fenced off, the request already finished).
		s := open(t, false)
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					id := fmt.Sprintf("o%d-%d", g, i)
					if _, _, err := s.Claim(ctx, rec("k:"+id, id), []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil {
						t.Error(err)
						return
					}
					if err := s.Append(ctx, false, ev(id, 2, 1, ledger.EvObserved)); err != nil {
						t.Error(err)
						return
					}
					if err := s.Finish(ctx, finish(id, 1, 3)); err != nil {
						t.Errorf("%s: %v", id, err)
						return
					}
					if evs, err := s.Events(ctx, id); err != nil || len(evs) != 3 {
						t.Errorf("%s: the finish overtook its own earlier write (events %v %v)", id, evs, err)
						return
					}
				}
			}()
			if g == 0 {
				wg.Wait() // the first writer alone, then fifteen at once
			}
		}
		wg.Wait()
	})
	t.Run("finish is fenced and final", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.Claim(ctx, rec("k:f", "f"), []ledger.Event{ev("f", 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		gen, err := s.Takeover(ctx, "f", "owner-2", 1, t0.Add(time.Minute))
		if err != nil || gen != 2 {
			t.Fatalf("takeover: %d %v", gen, err)
		}
		// The old owner's late result is fenced off and never overwrites.
		if err := s.Finish(ctx, finish("f", 1, 2)); !errors.Is(err, ledger.ErrStaleGeneration) {
			t.Fatalf("stale finish: %v", err)
		}
		if err := s.Finish(ctx, finish("f", 2, 2)); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, finish("f", 2, 3)); !errors.Is(err, ledger.ErrFinished) {
			t.Fatalf("second finish: %v", err)
		}
		if err := s.Append(ctx, true, ev("f", 3, 2, ledger.EvDispatch)); err == nil {
			t.Fatal("an event after the terminal was accepted")
		}
		if _, err := s.Takeover(ctx, "f", "owner-3", 2, t0); !errors.Is(err, ledger.ErrFinished) {
			t.Fatalf("takeover of a finished request: %v", err)
		}
		r, err := s.Get(ctx, "k:f")
		if err != nil || r.State != ledger.Succeeded || r.Generation != 2 || r.Owner != "owner-2" || r.Response == nil ||
			string(r.Response.Body) != `{"ok":true}` || !r.FinishedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("record %+v %v", r, err)
		}
		if body, err := s.Receipt(ctx, "acme", "f"); err != nil || string(body) != `{"request_id":"f"}` {
			t.Fatalf("receipt %s %v", body, err)
		}
	})
	t.Run("release frees the identity and keeps the history", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.Claim(ctx, rec("k:rel", "rel"), []ledger.Event{ev("rel", 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		f := finish("rel", 1, 2)
		f.Release = true
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "k:rel"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("released identity still held: %v", err)
		}
		if evs, _ := s.Events(ctx, "rel"); len(evs) != 2 {
			t.Fatalf("history lost: %v", evs)
		}
		if _, created, err := s.Claim(ctx, rec("k:rel", "rel2"), nil); err != nil || !created {
			t.Fatalf("reclaim after release: %v %v", created, err)
		}
	})
	t.Run("replace only the expected request", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.Claim(ctx, rec("f:x", "old"), nil); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Replace(ctx, "someone-else", rec("f:x", "new"), nil); err != nil || ok {
			t.Fatalf("replace with the wrong predecessor: %v %v", ok, err)
		}
		if ok, err := s.Replace(ctx, "old", rec("f:x", "new"), []ledger.Event{ev("new", 1, 1, ledger.EvCreated)}); err != nil || !ok {
			t.Fatalf("replace: %v %v", ok, err)
		}
		if r, _ := s.Get(ctx, "f:x"); r.RequestID != "new" || r.Keyed() {
			t.Fatalf("after replace: %+v", r)
		}
	})
	t.Run("receipts are tenant scoped and listed newest first", func(t *testing.T) {
		s := open(t, false)
		for _, id := range []string{"01a", "01b", "01c"} {
			if _, _, err := s.Claim(ctx, rec("k:"+id, id), nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, finish(id, 1, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Receipt(ctx, "globex", "01a"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("another tenant's receipt: %v", err)
		}
		list, err := s.Receipts(ctx, "acme", 2, "")
		if err != nil || len(list) != 2 || !bytes.Contains(list[0], []byte("01c")) || !bytes.Contains(list[1], []byte("01b")) {
			t.Fatalf("first page %q %v", list, err)
		}
		list, err = s.Receipts(ctx, "acme", 2, "01b")
		if err != nil || len(list) != 1 || !bytes.Contains(list[0], []byte("01a")) {
			t.Fatalf("next page %q %v", list, err)
		}
		if err := s.AddDedup(ctx, "acme", "01a", 1, 2, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.AddDedup(ctx, "acme", "01a", 0, 1, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, true); err != nil { // an empty append flushes nothing but must not fail
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			b, _ := s.Receipt(ctx, "acme", "01a")
			return bytes.Contains(b, []byte(`"dedup":{"joined":1,"replayed":3}`)) && bytes.Contains(b, []byte(`"client_retry_count":1`))
		})
	})
	t.Run("unfinished, renew and expire", func(t *testing.T) {
		s := open(t, false)
		mine, theirs, done, lapsed := rec("k:m", "m"), rec("k:t", "t"), rec("k:d", "d"), rec("k:l", "l")
		theirs.Owner = "other-owner"
		lapsed.LeaseUntil = t0.Add(-time.Second)
		for _, r := range []*ledger.Record{mine, theirs, done, lapsed} {
			if _, _, err := s.Claim(ctx, r, []ledger.Event{ev(r.RequestID, 1, 1, ledger.EvCreated), ev(r.RequestID, 2, 1, ledger.EvDispatch)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Finish(ctx, finish("d", 1, 3)); err != nil {
			t.Fatal(err)
		}
		u, err := s.Unfinished(ctx)
		if err != nil || len(u) != 3 {
			t.Fatalf("unfinished %+v %v", u, err)
		}
		for _, x := range u {
			if x.Record.RequestID == "t" && (len(x.Events) != 2 || x.Events[1].Type != ledger.EvDispatch) {
				t.Fatalf("unfinished events %+v", x.Events)
			}
		}
		// Only the owner's own live leases are renewed: not another
		// owner's, not a finished request's, not one that lapsed.
		lost, err := s.Renew(ctx, "owner-1", []string{"m", "t", "d", "l", "never"}, t0, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(lost)
		if !slices.Equal(lost, []string{"d", "l", "never", "t"}) {
			t.Fatalf("lost %v", lost)
		}
		if r, _ := s.Get(ctx, "k:m"); !r.LeaseUntil.Equal(t0.Add(time.Hour)) {
			t.Fatalf("lease %v", r.LeaseUntil)
		}
		if r, _ := s.Get(ctx, "k:t"); !r.LeaseUntil.Equal(t0.Add(30 * time.Second)) {
			t.Fatal("renew touched another owner's lease")
		}
		if r, _ := s.Get(ctx, "k:l"); !r.LeaseUntil.Equal(t0.Add(-time.Second)) {
			t.Fatal("a lapsed lease was renewed")
		}
		n, err := s.Expire(ctx, t0.Add(2*time.Second))
		if err != nil || n != 1 {
			t.Fatalf("expired %d %v", n, err)
		}
		if _, err := s.Get(ctx, "k:d"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatal("an expired record is still there")
		}
		if _, err := s.Receipt(ctx, "acme", "d"); err != nil {
			t.Fatal("expiry must keep the receipt")
		}
		if _, err := s.Get(ctx, "k:m"); err != nil {
			t.Fatal("expiry removed an in-progress record")
		}
	})
	t.Run("recovery: lapsed leases listed and settled with their charges, never a live one", func(t *testing.T) {
		s := open(t, false)
		dead := rec("k:pend", "pend")
		dead.Owner = "dead"
		idle := rec("k:idle", "idle")
		idle.Owner = "dead"
		mine := rec("k:mine", "mine")
		mine.LeaseUntil = t0.Add(2 * time.Minute)
		live := rec("k:live", "live")
		live.Owner, live.LeaseUntil = "another-gateway", t0.Add(2*time.Minute)
		for _, c := range []struct {
			r   *ledger.Record
			evs []ledger.Event
		}{
			{dead, []ledger.Event{ev("pend", 1, 1, ledger.EvCreated), ev("pend", 2, 1, ledger.EvReserved), ev("pend", 3, 1, ledger.EvDispatch)}},
			{idle, []ledger.Event{ev("idle", 1, 1, ledger.EvCreated), ev("idle", 2, 1, ledger.EvDispatch), ev("idle", 3, 1, ledger.EvObserved)}},
			{mine, []ledger.Event{ev("mine", 1, 1, ledger.EvCreated), ev("mine", 2, 1, ledger.EvDispatch)}},
			{live, []ledger.Event{ev("live", 1, 1, ledger.EvCreated), ev("live", 2, 1, ledger.EvDispatch)}},
		} {
			if _, _, err := s.Claim(ctx, c.r, c.evs); err != nil {
				t.Fatal(err)
			}
		}
		at := t0.Add(time.Minute)
		lapsed, err := s.Lapsed(ctx, at)
		if err != nil || len(lapsed) != 2 {
			t.Fatalf("lapsed %d %v", len(lapsed), err)
		}
		slices.SortFunc(lapsed, func(a, b ledger.Unfinished) int { return strings.Compare(a.Record.RequestID, b.Record.RequestID) })
		if lapsed[0].Record.RequestID != "idle" || lapsed[1].Record.RequestID != "pend" || len(lapsed[1].Events) != 3 ||
			!ledger.InFlight(lapsed[1].Events) || ledger.InFlight(lapsed[0].Events) {
			t.Fatalf("lapsed %+v", lapsed)
		}
		term := func(id, terminal string) ledger.Event {
			return ledger.Event{RequestID: id, Seq: 4, Generation: 1, Type: ledger.EvTerminal, At: at,
				Data: []byte(`{"by":"recovery","terminal":"` + terminal + `"}`)}
		}
		pend := &ledger.Finish{Identity: "k:pend", RequestID: "pend", Generation: 1, State: ledger.Indeterminate, At: at, Takeover: true,
			Events: []ledger.Event{term("pend", "indeterminate")}, Receipt: []byte(`{"request_id":"pend"}`), Tenant: "acme", Charge: 1000}
		idleF := &ledger.Finish{Identity: "k:idle", RequestID: "idle", Generation: 1, State: ledger.FailedNoEffect, At: at, Release: true,
			Events: []ledger.Event{term("idle", "cancelled")}, Receipt: []byte(`{"request_id":"idle"}`), Tenant: "acme", Charge: 20}
		liveF := &ledger.Finish{Identity: "k:live", RequestID: "live", Generation: 1, State: ledger.Indeterminate, At: at, Takeover: true,
			Events: []ledger.Event{term("live", "indeterminate")}, Tenant: "acme", Charge: 1e6}
		settled, err := s.Settle(ctx, []*ledger.Finish{pend, idleF, liveF})
		slices.Sort(settled)
		if err != nil || !slices.Equal(settled, []string{"idle", "pend"}) {
			t.Fatalf("settled %v %v", settled, err)
		}
		if r, err := s.Get(ctx, "k:pend"); err != nil || r.State != ledger.Indeterminate || r.Generation != 2 || !r.FinishedAt.Equal(at) {
			t.Fatalf("pending dispatch: %+v %v", r, err)
		}
		if _, err := s.Get(ctx, "k:idle"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatal("a request with nothing in flight kept its identity")
		}
		for _, k := range []string{"k:mine", "k:live"} {
			if r, _ := s.Get(ctx, k); r.State != ledger.InProgress || r.Generation != 1 {
				t.Fatalf("recovery settled %s, whose lease is live", k)
			}
		}
		// The settlement's charges are durable with it: the day's spend
		// never misses a settled request while its receipt is built.
		if spend, err := s.Spend(ctx, ledger.Day(at)); err != nil || spend["acme"] != 1020 {
			t.Fatalf("spend after settling %v (%v), want 1020", spend, err)
		}
		// The lapsed owner's late terminal is refused.
		if err := s.Finish(ctx, finish("pend", 1, 5)); !errors.Is(err, ledger.ErrStaleGeneration) {
			t.Fatalf("a lapsed owner's late finish: %v", err)
		}
		evs, _ := s.Events(ctx, "pend")
		if last := evs[len(evs)-1]; last.Type != ledger.EvTerminal || last.Seq != 4 || !bytes.Contains(last.Data, []byte(`"terminal":"indeterminate"`)) {
			t.Fatalf("terminal event %+v", last)
		}
		waitFor(t, func() bool { b, _ := s.Receipt(ctx, "acme", "pend"); return string(b) == `{"request_id":"pend"}` })
		// A receipt put again (rebuilt on demand) is not charged again.
		if err := s.PutReceipt(ctx, &ledger.StoredReceipt{Tenant: "acme", RequestID: "pend", Body: []byte(`{"a":2}`), Charge: 1000, At: at}); err != nil {
			t.Fatal(err)
		}
		if spend, err := s.Spend(ctx, ledger.Day(at)); err != nil || spend["acme"] != 1020 {
			t.Fatalf("a receipt put twice charged %v (%v), want 1020", spend, err)
		}
		if left, err := s.Lapsed(ctx, at); err != nil || len(left) != 0 {
			t.Fatalf("still lapsed after settling: %d %v", len(left), err)
		}
	})
	t.Run("the day's spend is kept per tenant and day", func(t *testing.T) {
		s := open(t, false)
		day := ledger.Day(t0)
		for i, c := range []struct {
			tenant string
			charge int64
			at     time.Time
		}{{"acme", 250, t0}, {"acme", 750, t0.Add(time.Hour)}, {"globex", 5, t0}, {"acme", 1e9, t0.Add(24 * time.Hour)}} {
			id := fmt.Sprintf("spend-%d", i)
			if _, _, err := s.Claim(ctx, rec("k:"+id, id), nil); err != nil {
				t.Fatal(err)
			}
			f := finish(id, 1, 1)
			f.Tenant, f.Charge, f.At = c.tenant, c.charge, c.at
			if err := s.Finish(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		settled := rec("k:settled", "settled")
		settled.LeaseUntil = t0 // its owner is gone: recovery may settle it
		if _, _, err := s.Claim(ctx, settled, nil); err != nil {
			t.Fatal(err)
		}
		f := finish("settled", 1, 1)
		f.Charge, f.Takeover = 3000, true
		fenced := finish("spend-0", 1, 9) // finished already: skipped, not charged
		fenced.Charge = 1e6
		if ids, err := s.Settle(ctx, []*ledger.Finish{f, fenced}); err != nil || len(ids) != 1 {
			t.Fatal(ids, err)
		}
		got, err := s.Spend(ctx, day)
		if err != nil || got["acme"] != 4000 || got["globex"] != 5 || len(got) != 2 {
			t.Fatalf("spend of the day %v %v", got, err)
		}
		if got, _ := s.Spend(ctx, day+1); got["acme"] != 1e9 {
			t.Fatalf("spend of the next day %v", got)
		}
		if got, _ := s.Spend(ctx, day-1); len(got) != 0 {
			t.Fatalf("spend of the day before %v", got)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
	})
	t.Run("durable across a restart", func(t *testing.T) {
		s := open(t, false)
		secret, err := s.Secret(ctx)
		if err != nil || len(secret) < 16 {
			t.Fatalf("secret %x %v", secret, err)
		}
		if _, _, err := s.Claim(ctx, rec("k:dur", "dur"), []ledger.Event{ev("dur", 1, 1, ledger.EvCreated)}); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"first", "second"} {
			if err := s.SaveState(ctx, "rates", []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		f := finish("dur", 1, 2)
		f.Charge = 42
		if err := s.Finish(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2 := open(t, true)
		again, err := s2.Secret(ctx)
		if err != nil || !bytes.Equal(secret, again) {
			t.Fatal("the secret changed across a restart")
		}
		if r, err := s2.Get(ctx, "k:dur"); err != nil || r.State != ledger.Succeeded {
			t.Fatalf("after restart: %+v %v", r, err)
		}
		if spend, err := s2.Spend(ctx, ledger.Day(t0)); err != nil || spend["acme"] != 42 {
			t.Fatalf("the day's spend after a restart: %v %v", spend, err)
		}
		if v, err := s2.State(ctx, "rates"); err != nil || string(v) != "second" {
			t.Fatalf("a saved state after a restart: %q %v", v, err)
		}
		if _, err := s2.State(ctx, "never-saved"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a state never saved: %v", err)
		}
	})
	t.Run("property: owners and crashes never make two terminals", func(t *testing.T) {
		s := open(t, false)
		n := 0
		rapid.Check(t, func(rt *rapid.T) {
			n++
			checkInterleaving(rt, s, fmt.Sprintf("p%d", n))
		})
	})
}

// checkInterleaving plays random steps of several owners of one request —
// appends, takeovers (a crash and a new owner), finishes — and checks that
// at most one terminal lands, nothing lands after it, and the log is
// strictly ordered.
func checkInterleaving(t *rapid.T, s ledger.Store, id string) {
	ctx := context.Background()
	if _, _, err := s.Claim(ctx, rec("k:"+id, id), []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil {
		t.Fatal(err)
	}
	gens := []int64{1} // each owner's generation; index 0 is the first owner
	seq := int64(1)
	current := int64(1)
	terminals := 0
	finished := false
	for step := 0; step < rapid.IntRange(1, 25).Draw(t, "steps"); step++ {
		o := rapid.IntRange(0, len(gens)-1).Draw(t, "owner")
		switch rapid.IntRange(0, 2).Draw(t, "action") {
		case 0:
			seq++
			err := s.Append(ctx, true, ev(id, seq, gens[o], ledger.EvObserved))
			if err == nil && (gens[o] != current || finished) {
				t.Fatalf("append from generation %d accepted (current %d, finished %v)", gens[o], current, finished)
			}
			if err != nil {
				seq--
			}
		case 1:
			g, err := s.Takeover(ctx, id, fmt.Sprintf("owner-%d", len(gens)+1), current, t0)
			if finished != (err != nil) {
				t.Fatalf("takeover after finish=%v: %v", finished, err)
			}
			if err == nil {
				current = g
				gens = append(gens, g)
			}
		case 2:
			seq++
			err := s.Finish(ctx, finish(id, gens[o], seq))
			if err == nil {
				terminals++
				finished = true
			} else {
				seq--
			}
		}
	}
	if terminals > 1 {
		t.Fatalf("%d terminals", terminals)
	}
	evs, err := s.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sawTerminal := false
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("log out of order at %d: %+v", i, e)
		}
		if sawTerminal {
			t.Fatalf("event after the terminal: %+v", e)
		}
		sawTerminal = e.Type == ledger.EvTerminal
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		<-time.After(5 * time.Millisecond)
	}
}
