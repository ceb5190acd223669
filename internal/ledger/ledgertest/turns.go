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
	t.Run("turns: a key and a parent each hold one live turn", func(t *testing.T) {
		s := open(t, false)
		if _, created, err := s.BeginTurn(ctx, turn("resp_root", "", "key-root")); err != nil || !created {
			t.Fatalf("root: %v %v", created, err)
		}
		got, created, err := s.BeginTurn(ctx, turn("resp_again", "", "key-root"))
		if err != nil || created || got == nil || got.ResponseID != "resp_root" {
			t.Fatalf("same key: %+v %v %v", got, created, err)
		}
		if _, created, err := s.BeginTurn(ctx, turn("resp_a", "resp_root", "")); err != nil || !created {
			t.Fatalf("child: %v %v", created, err)
		}
		got, created, err = s.BeginTurn(ctx, turn("resp_b", "resp_root", "key-b"))
		if err != nil || created || got.ResponseID != "resp_a" {
			t.Fatalf("a second child of one parent: %+v %v %v", got, created, err)
		}
		// A failed turn frees its parent.
		a, _ := s.Turn(ctx, "acme", "resp_a")
		a.State, a.Status, a.Response, a.UpdatedAt = ledger.TurnFailed, 503, []byte(`{"error":{}}`), t0.Add(time.Second)
		if ok, err := s.UpdateTurn(ctx, a, ledger.TurnPending, 1); err != nil || !ok {
			t.Fatalf("fail: %v %v", ok, err)
		}
		if ok, _ := s.UpdateTurn(ctx, a, ledger.TurnPending, 1); ok {
			t.Fatal("an update from a state the turn left applied")
		}
		if _, created, err := s.BeginTurn(ctx, turn("resp_b", "resp_root", "key-b")); err != nil || !created {
			t.Fatalf("after the failure: %v %v", created, err)
		}
		turns, err := s.ConversationTurns(ctx, "acme", "resp_root")
		if err != nil || len(turns) != 3 || turns[0].ResponseID != "resp_root" {
			t.Fatalf("conversation: %d %v", len(turns), err)
		}
		chain := ledger.Chain(turns, "resp_b")
		if len(chain) != 2 || chain[0].ResponseID != "resp_root" || chain[1].ResponseID != "resp_b" {
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
		f, err := s.TurnByFingerprint(ctx, "acme", "fp-resp_b", "resp_root")
		if err != nil || f.ResponseID != "resp_b" {
			t.Fatalf("by fingerprint: %+v %v", f, err)
		}
	})
	t.Run("turns: concurrent continuations, exactly one live", func(t *testing.T) {
		s := open(t, false)
		if _, _, err := s.BeginTurn(ctx, turn("resp_root", "", "")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := map[string]bool{}
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("resp_c%d", i)
				got, created, err := s.BeginTurn(ctx, turn(id, "resp_root", fmt.Sprintf("k%d", i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if created {
					won[id] = true
				} else {
					won[got.ResponseID] = true
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%d live continuations of one parent: %v", len(won), won)
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
		got, err := s.Orphans(ctx, "acme", "resp_root")
		if err != nil || len(got) != 1 || *got[0] != *o {
			t.Fatalf("orphans: %+v %v", got, err)
		}
		if got, _ := s.Orphans(ctx, "other", "resp_root"); len(got) != 0 {
			t.Fatal("another tenant sees the orphan")
		}
	})
}
