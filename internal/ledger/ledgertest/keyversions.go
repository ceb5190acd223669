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

// runKeyVersions holds every backend to the keys' conditional writes
// (docs/keys-and-teams.md): a write based on a version another write replaced
// changes nothing, a revocation is final, and each previous secret keeps
// its own end.
func runKeyVersions(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("keys: a write based on a replaced version changes nothing", func(t *testing.T) {
		s := open(t, false)
		k := key("kv", "acme", "dv", t0)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		stale := *k
		k.Name = "renamed"
		if err := s.UpdateKey(ctx, k); err != nil || k.Version != 2 {
			t.Fatalf("update at the stored version: %v, version %d", err, k.Version)
		}
		stale.Spec.Models = []string{"other"}
		if err := s.UpdateKey(ctx, &stale); !errors.Is(err, ledger.ErrConflict) || stale.Version != 1 {
			t.Fatalf("update at a replaced version: %v (version %d), want ErrConflict", err, stale.Version)
		}
		if _, err := s.RevokeKey(ctx, "kv", 1, t0.Add(time.Second)); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("revocation at a replaced version: %v, want ErrConflict", err)
		}
		got, err := s.Key(ctx, "kv")
		if err != nil || got.Name != "renamed" || len(got.Spec.Models) != 1 || got.Spec.Models[0] != "chat" || got.Version != 2 || got.Revoked() {
			t.Fatalf("after two refused writes: %+v %v", got, err)
		}
		if _, err := s.RevokeKey(ctx, "nope", 0, t0); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("revocation of an unknown key: %v", err)
		}
	})
	t.Run("keys: a revocation is final", func(t *testing.T) {
		s := open(t, false)
		k := key("kr", "acme", "dr", t0)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		k.Previous = []ledger.PrevSecret{{Digest: "dr0", Until: t0.Add(time.Hour)}}
		if err := s.UpdateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Second)
		rk, err := s.RevokeKey(ctx, "kr", k.Version, at)
		if err != nil || !rk.RevokedAt.Equal(at) || rk.Version != 3 || len(rk.Previous) != 0 || rk.Name != k.Name {
			t.Fatalf("revoke: %+v %v", rk, err)
		}
		// Every later write is refused, whatever version it names.
		k.Name = "undo"
		if err := s.UpdateKey(ctx, k); !errors.Is(err, ledger.ErrKeyRevoked) {
			t.Fatalf("update at the version before the revocation: %v, want ErrKeyRevoked", err)
		}
		fresh, _ := s.Key(ctx, "kr")
		fresh.RevokedAt, fresh.Name = time.Time{}, "undo"
		if err := s.UpdateKey(ctx, fresh); !errors.Is(err, ledger.ErrKeyRevoked) {
			t.Fatalf("update at the revoked version: %v, want ErrKeyRevoked", err)
		}
		if _, err := s.RevokeKey(ctx, "kr", 0, at.Add(time.Hour)); !errors.Is(err, ledger.ErrKeyRevoked) {
			t.Fatalf("a second revocation: %v, want ErrKeyRevoked", err)
		}
		if _, err := s.KeyByDigest(ctx, "dr0"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a revoked key's previous secret: %v, want ErrNotFound", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		got, err := s.KeyByDigest(ctx, "dr")
		if err != nil || !got.RevokedAt.Equal(at) || got.Name == "undo" || got.Version != 3 {
			t.Fatalf("after a restart: %+v %v", got, err)
		}
	})
	t.Run("keys: each previous secret keeps its own end", func(t *testing.T) {
		s := open(t, false)
		k := key("kp", "acme", "d0", t0)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		// Two rotations: d0 with a 10-minute grace, then d1 with 5.
		k.Previous, k.Digest = []ledger.PrevSecret{{Digest: "d0", Until: t0.Add(10 * time.Minute)}}, "d1"
		if err := s.UpdateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		k.Previous, k.Digest = append(k.Previous, ledger.PrevSecret{Digest: "d1", Until: t0.Add(5 * time.Minute)}), "d2"
		if err := s.UpdateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"d0", "d1", "d2"} {
			got, err := s.KeyByDigest(ctx, d)
			if err != nil || got.ID != "kp" || got.Digest != "d2" || len(got.Previous) != 2 ||
				!got.Prev("d0").Until.Equal(t0.Add(10*time.Minute)) || !got.Prev("d1").Until.Equal(t0.Add(5*time.Minute)) {
				t.Fatalf("by digest %s: %+v %v", d, got, err)
			}
		}
		// A digest, current or previous, names one key.
		if err := s.CreateKey(ctx, key("kq", "acme", "d1", t0)); !errors.Is(err, ledger.ErrKeyExists) {
			t.Fatalf("a new key with another's previous digest: %v, want ErrKeyExists", err)
		}
		q := key("kq", "acme", "dq", t0)
		if err := s.CreateKey(ctx, q); err != nil {
			t.Fatal(err)
		}
		q.Previous, q.Digest = []ledger.PrevSecret{{Digest: "dq", Until: t0.Add(time.Hour)}}, "d0"
		if err := s.UpdateKey(ctx, q); !errors.Is(err, ledger.ErrKeyExists) {
			t.Fatalf("a rotation to another key's previous digest: %v, want ErrKeyExists", err)
		}
		if got, _ := s.Key(ctx, "kq"); got.Digest != "dq" || got.Version != 1 || len(got.Previous) != 0 {
			t.Fatalf("a refused rotation wrote: %+v", got)
		}
		// The secrets a write no longer lists stop naming the key.
		k.Previous = k.Previous[1:]
		if err := s.UpdateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := s.KeyByDigest(ctx, "d0"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a dropped previous secret: %v, want ErrNotFound", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		if got, err := s.KeyByDigest(ctx, "d1"); err != nil || got.ID != "kp" || len(got.Previous) != 1 || got.Version != 4 {
			t.Fatalf("after a restart: %+v %v", got, err)
		}
	})
	t.Run("keys: of concurrent writes at one version exactly one wins", func(t *testing.T) {
		s := open(t, false)
		k := key("kc", "acme", "dc", t0)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		const n = 16
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := *k
				c.Name = fmt.Sprintf("writer-%d", i)
				errs[i] = s.UpdateKey(ctx, &c)
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("writers %d and %d both wrote at version 1", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, ledger.ErrConflict):
				t.Fatalf("writer %d: %v, want ErrConflict", i, err)
			}
		}
		got, err := s.Key(ctx, "kc")
		if winner < 0 || err != nil || got.Name != fmt.Sprintf("writer-%d", winner) || got.Version != 2 {
			t.Fatalf("winner %d, stored %+v %v", winner, got, err)
		}
	})
	t.Run("keys: a revocation racing an update is never undone", func(t *testing.T) {
		s := open(t, false)
		for i := range 16 {
			id := fmt.Sprintf("kx%d", i)
			k := key(id, "acme", "dx"+id, t0)
			if err := s.CreateKey(ctx, k); err != nil {
				t.Fatal(err)
			}
			var upd, rev error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				c := *k
				c.Name = "updated"
				upd = s.UpdateKey(ctx, &c)
			}()
			go func() { defer wg.Done(); _, rev = s.RevokeKey(ctx, id, 0, t0.Add(time.Second)) }()
			wg.Wait()
			got, err := s.Key(ctx, id)
			switch {
			case err != nil || rev != nil:
				t.Fatalf("%s: revoke %v, read %v", id, rev, err)
			case !got.Revoked():
				t.Fatalf("%s: the update (%v) undid the revocation", id, upd)
			case upd == nil && (got.Name != "updated" || got.Version != 3):
				t.Fatalf("%s: the update succeeded, yet the key is %+v", id, got)
			case upd != nil && !errors.Is(upd, ledger.ErrKeyRevoked):
				t.Fatalf("%s: the update after the revocation: %v, want ErrKeyRevoked", id, upd)
			}
		}
	})
}
