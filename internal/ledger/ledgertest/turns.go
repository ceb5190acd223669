package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

func turn(id, parent, key string) *ledger.Turn {
	conv := id
	depth := 1
	if parent != "" {
		conv, depth = "resp_root", 2
	}
	return &ledger.Turn{ResponseID: id, Tenant: "acme", Conversation: conv, Parent: parent, Depth: depth, KeyDigest: key,
		Fingerprint: "fp-" + id, RequestSHA256: "sha-" + id, State: ledger.TurnPending, Try: 1, RequestID: "req-" + id,
		Input: []byte(`[{"type":"message"}]`), Request: []byte(`{"model":"m"}`), CreatedAt: t0, UpdatedAt: t0}
}

// runTurns is the turn ledger's part of the suite.
func runTurns(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("turns: a key holds one turn, a parent many continuations", func(t *testing.T) {
		s := open(t, false)
		if _, created, err := s.BeginTurn(ctx, turn("resp_root", "", "key-root")); err != nil || !created {
			t.Fatalf("root: %v %v", created, err)
		}
		got, created, err := s.BeginTurn(ctx, turn("resp_again", "", "key-root"))
		if err != nil || created || got == nil || got.ResponseID != "resp_root" {
			t.Fatalf("same key: %+v %v %v", got, created, err)
		}
		a := turn("resp_a", "resp_root", "")
		if _, created, err := s.BeginTurn(ctx, a); err != nil || !created || a.Branch != 0 {
			t.Fatalf("child: %v %v, branch %d", created, err, a.Branch)
		}
		// Another continuation of the same parent is a branch of its own.
		b := turn("resp_b", "resp_root", "key-b")
		if _, created, err := s.BeginTurn(ctx, b); err != nil || !created || b.Branch != 1 {
			t.Fatalf("a second child of one parent: %v %v, branch %d", created, err, b.Branch)
		}
		// A keyless arrival of the same body on the same parent, while
		// the turn is in flight, is that turn.
		twin := turn("resp_a2", "resp_root", "")
		twin.Fingerprint = a.Fingerprint
		got, created, err = s.BeginTurn(ctx, twin)
		if err != nil || created || got == nil || got.ResponseID != "resp_a" {
			t.Fatalf("a keyless twin in flight: %+v %v %v", got, created, err)
		}
		got, _ = s.Turn(ctx, "acme", "resp_a")
		got.State, got.Status, got.Response, got.UpdatedAt = ledger.TurnFailed, 503, []byte(`{"error":{}}`), t0.Add(time.Second)
		if ok, err := s.UpdateTurn(ctx, got, ledger.TurnPending, 1); err != nil || !ok {
			t.Fatalf("fail: %v %v", ok, err)
		}
		if ok, _ := s.UpdateTurn(ctx, got, ledger.TurnPending, 1); ok {
			t.Fatal("an update from a state the turn left applied")
		}
		// Settled, it is not in flight: the twin is a new turn.
		if _, created, err := s.BeginTurn(ctx, twin); err != nil || !created || twin.Branch != 2 {
			t.Fatalf("a keyless twin of a settled turn: %v %v, branch %d", created, err, twin.Branch)
		}
		turns, err := s.ConversationTurns(ctx, "acme", "resp_root")
		if err != nil || len(turns) != 4 || turns[0].ResponseID != "resp_root" {
			t.Fatalf("conversation: %d %v", len(turns), err)
		}
		chain := ledger.Chain(turns, "resp_b")
		if len(chain) != 2 || chain[0].ResponseID != "resp_root" || chain[1].ResponseID != "resp_b" || chain[1].Branch != 1 {
			t.Fatalf("chain: %+v", chain)
		}
		if _, err := s.Turn(ctx, "other", "resp_root"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("another tenant's turn: %v", err)
		}
		got, err = s.Turn(ctx, "acme", "resp_a")
		if err != nil || got.State != ledger.TurnFailed || got.Status != 503 || string(got.Response) != `{"error":{}}` ||
			string(got.Input) != `[{"type":"message"}]` || !got.UpdatedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("read back: %+v %v", got, err)
		}
		f, err := s.TurnByFingerprint(ctx, "acme", a.Fingerprint, "resp_root")
		if err != nil || f.ResponseID != "resp_a2" {
			t.Fatalf("by fingerprint, the newest: %+v %v", f, err)
		}
		if f, err := s.TurnByFingerprint(ctx, "acme", b.Fingerprint, "resp_root"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a keyed turn found by its fingerprint: %+v %v", f, err)
		}
	})
	t.Run("turns: a turn keeps the virtual key that made it", func(t *testing.T) {
		s := open(t, false)
		own := turn("resp_own", "", "key-own")
		own.KeyID = "key_a"
		if _, created, err := s.BeginTurn(ctx, own); err != nil || !created {
			t.Fatalf("begin: %v %v", created, err)
		}
		if _, _, err := s.BeginTurn(ctx, turn("resp_file", "", "")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Turn(ctx, "acme", "resp_own")
		if err != nil || got.KeyID != "key_a" {
			t.Fatalf("read back: %+v %v", got, err)
		}
		// An update writes the turn's state, never its owner.
		got.State, got.KeyID = ledger.TurnDone, "key_b"
		if ok, err := s.UpdateTurn(ctx, got, ledger.TurnPending, 1); err != nil || !ok {
			t.Fatalf("update: %v %v", ok, err)
		}
		for id, want := range map[string]string{"resp_own": "key_a", "resp_file": ""} {
			if got, err := s.Turn(ctx, "acme", id); err != nil || got.KeyID != want {
				t.Fatalf("%s: key %q (%v), want %q", id, got.KeyID, err, want)
			}
		}
		existing, created, err := s.BeginTurn(ctx, turn("resp_again", "", "key-own"))
		if err != nil || created || existing.KeyID != "key_a" {
			t.Fatalf("the turn of the same key digest: %+v %v %v", existing, created, err)
		}
	})
	t.Run("turns: a deleted turn replays from nowhere", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.BeginTurn(ctx, turn("resp_root", "", "")); err != nil {
			t.Fatal(err)
		}
		a := turn("resp_a", "resp_root", "")
		if _, _, err := s.BeginTurn(ctx, a); err != nil {
			t.Fatal(err)
		}
		// Two tries: the first finished (its answer would replay), the
		// second still in progress.
		for try, state := range []ledger.State{ledger.Succeeded, ledger.InProgress} {
			id := fmt.Sprintf("req-a%d", try+1)
			r := rec(ledger.TryIdentity("resp_a", try+1), id)
			if _, _, err := s.Claim(ctx, r, []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil {
				t.Fatal(err)
			}
			if state == ledger.Succeeded {
				f := finish(id, 1, 2)
				f.Identity = r.Identity
				if err := s.Finish(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, _ := s.Turn(ctx, "acme", "resp_a")
		got.State, got.Try, got.Response = ledger.TurnDone, 2, []byte(`{"id":"resp_a"}`)
		if ok, err := s.UpdateTurn(ctx, got, ledger.TurnPending, 1); err != nil || !ok {
			t.Fatalf("done: %v %v", ok, err)
		}
		got.UpdatedAt = t0.Add(time.Minute)
		if ok, err := s.DeleteTurn(ctx, got, ledger.TurnPending, 1); err != nil || ok {
			t.Fatalf("a delete from a state the turn left: %v %v", ok, err)
		}
		if ok, err := s.DeleteTurn(ctx, got, ledger.TurnDone, 2); err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if d, err := s.Turn(ctx, "acme", "resp_a"); err != nil || !d.Deleted || d.State != ledger.TurnDone || !d.UpdatedAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("the deleted turn: %+v %v", d, err)
		}
		if r, err := s.Get(ctx, ledger.TryIdentity("resp_a", 1)); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the finished try's record, whose answer would replay the deleted turn: %+v %v", r, err)
		}
		if r, err := s.Get(ctx, ledger.TryIdentity("resp_a", 2)); err != nil || r.State != ledger.InProgress {
			t.Fatalf("a try in progress is its owner's: %+v %v", r, err)
		}
		if evs, err := s.Events(ctx, "req-a1"); err != nil || len(evs) != 2 {
			t.Fatalf("the deleted try's events stay: %d %v", len(evs), err)
		}
		// Deleted, a turn is found by nothing: not by its fingerprint, not
		// as a twin in flight.
		if f, err := s.TurnByFingerprint(ctx, "acme", a.Fingerprint, "resp_root"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a deleted turn found by its fingerprint: %+v %v", f, err)
		}
		unknown := turn("resp_u", "resp_root", "")
		if _, _, err := s.BeginTurn(ctx, unknown); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.DeleteTurn(ctx, unknown, ledger.TurnPending, 1); err != nil || !ok {
			t.Fatalf("delete: %v %v", ok, err)
		}
		twin := turn("resp_v", "resp_root", "")
		twin.Fingerprint = unknown.Fingerprint
		if _, created, err := s.BeginTurn(ctx, twin); err != nil || !created || twin.Branch != 2 {
			t.Fatalf("the twin of a deleted turn: %v %v, branch %d", created, err, twin.Branch)
		}
	})
	t.Run("turns: concurrent continuations each get a branch, twins one turn", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.BeginTurn(ctx, turn("resp_root", "", "")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		branches := map[int]string{}
		twins := map[string]int{}
		for i := range 32 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				tn := turn(fmt.Sprintf("resp_c%d", i), "resp_root", fmt.Sprintf("k%d", i))
				_, created, err := s.BeginTurn(ctx, tn)
				if err != nil || !created {
					t.Errorf("continuation %d: %v %v", i, created, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if other, ok := branches[tn.Branch]; ok {
					t.Errorf("%s and %s are both branch %d", other, tn.ResponseID, tn.Branch)
				}
				branches[tn.Branch] = tn.ResponseID
			}()
			go func() {
				defer wg.Done()
				tn := turn(fmt.Sprintf("resp_t%d", i), "resp_c0", "")
				tn.Fingerprint = "fp-twin"
				got, created, err := s.BeginTurn(ctx, tn)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if created {
					twins[tn.ResponseID]++
				} else {
					twins[got.ResponseID]++
				}
			}()
		}
		wg.Wait()
		for b := range 32 {
			if branches[b] == "" {
				t.Fatalf("branches %v: %d is missing", branches, b)
			}
		}
		if len(twins) != 1 {
			t.Fatalf("32 keyless twins in flight made %d turns: %v", len(twins), twins)
		}
	})
	t.Run("turns: orphans are kept per conversation", func(t *testing.T) {
		s := open(t, false)
		o := &ledger.Orphan{Tenant: "acme", Conversation: "resp_root", ResponseID: "resp_a", UpstreamID: "up_1", Route: "r",
			InputTokens: 10, OutputTokens: 20, Cost: 1234, At: t0}
		if added, err := s.AddOrphan(ctx, o); err != nil || !added {
			t.Fatalf("add orphan: %v, %v", added, err)
		}
		// Found again (a removal a crash interrupted): recorded once,
		// with what the first record said.
		again := *o
		again.OutputTokens, again.Cost = 3, 99
		if added, err := s.AddOrphan(ctx, &again); err != nil || added {
			t.Fatalf("the same upstream copy recorded twice: %v, %v", added, err)
		}
		// An orphan is spend: charged to its tenant's day once.
		if spend, err := s.Spend(ctx, ledger.Day(t0)); err != nil || spend["acme"] != 1234 {
			t.Fatalf("the orphan's charge: %v %v, want 1234 once", spend, err)
		}
		got, err := s.Orphans(ctx, "acme", "resp_root")
		if err != nil || len(got) != 1 || *got[0] != *o {
			t.Fatalf("orphans: %+v %v", got, err)
		}
		if got, _ := s.Orphans(ctx, "other", "resp_root"); len(got) != 0 {
			t.Fatal("another tenant sees the orphan")
		}
	})
}
