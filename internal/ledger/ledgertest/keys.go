package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
)

func key(id, tenant, digest string, at time.Time) *ledger.Key {
	return &ledger.Key{ID: id, Tenant: tenant, Name: "app-" + id, Digest: digest, Prefix: "og-" + id[:2],
		Spec: ledger.KeySpec{Models: []string{"chat"}, Budget: ledger.KeyBudget{RequestsPerMinute: 60, CostUSDPerDay: 1.5},
			MaxDataBoundary: "private", Metadata: map[string]string{"team": "search"}},
		ExpiresAt: at.Add(24 * time.Hour), CreatedAt: at, UpdatedAt: at}
}

// runKeys is the virtual keys' part of the suite.
func runKeys(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("keys: create, read by id and digest, list, update, keep across a restart", func(t *testing.T) {
		s := open(t, false)
		a, b := key("k1", "acme", "d1", t0), key("k2", "beta", "d2", t0.Add(time.Second))
		for _, k := range []*ledger.Key{a, b} {
			if err := s.CreateKey(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CreateKey(ctx, key("k3", "acme", "d1", t0)); !errors.Is(err, ledger.ErrKeyExists) {
			t.Fatalf("a taken digest: %v, want ErrKeyExists", err)
		}
		if err := s.CreateKey(ctx, key("k1", "acme", "d9", t0)); !errors.Is(err, ledger.ErrKeyExists) {
			t.Fatalf("a taken id: %v, want ErrKeyExists", err)
		}
		got, err := s.Key(ctx, "k1")
		if err != nil || got.Tenant != "acme" || got.Spec.Budget.CostUSDPerDay != 1.5 || got.Spec.Metadata["team"] != "search" ||
			!got.ExpiresAt.Equal(a.ExpiresAt) || !got.CreatedAt.Equal(t0) || got.Revoked() {
			t.Fatalf("by id: %+v %v", got, err)
		}
		if _, err := s.Key(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
		if got, err := s.KeyByDigest(ctx, "d2"); err != nil || got.ID != "k2" {
			t.Fatalf("by digest: %+v %v", got, err)
		}
		if a.Version != 1 || got.Version != 1 {
			t.Fatalf("a new key's version: %d, stored %d, want 1", a.Version, got.Version)
		}
		// A rotation: the new digest and the old one, until its grace ends.
		a.Previous = []ledger.PrevSecret{{Digest: "d1", Prefix: "og-d1", Until: t0.Add(time.Minute)}}
		a.Digest, a.UpdatedAt = "d1b", t0.Add(2*time.Second)
		a.Spec.Models = []string{"chat", "embed"}
		if err := s.UpdateKey(ctx, a); err != nil || a.Version != 2 {
			t.Fatalf("update: %v, version %d", err, a.Version)
		}
		for _, d := range []string{"d1", "d1b"} {
			got, err := s.KeyByDigest(ctx, d)
			if err != nil || got.ID != "k1" || got.Version != 2 || len(got.Previous) != 1 || got.Prev("d1") == nil ||
				!got.Prev("d1").Until.Equal(t0.Add(time.Minute)) || got.Prev("d1").Prefix != "og-d1" {
				t.Fatalf("by digest %s after rotation: %+v %v", d, got, err)
			}
		}
		if err := s.UpdateKey(ctx, key("nope", "acme", "dx", t0)); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("update of an unknown key: %v", err)
		}
		if _, err := s.RevokeKey(ctx, "k2", 0, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		yes, no := true, false
		for _, c := range []struct {
			f    ledger.KeyFilter
			want []string
		}{
			{ledger.KeyFilter{}, []string{"k1", "k2"}},
			{ledger.KeyFilter{Tenant: "acme"}, []string{"k1"}},
			{ledger.KeyFilter{Name: "app-k2"}, []string{"k2"}},
			{ledger.KeyFilter{Revoked: &yes}, []string{"k2"}},
			{ledger.KeyFilter{Revoked: &no}, []string{"k1"}},
			{ledger.KeyFilter{Tenant: "nobody"}, nil},
		} {
			list, err := s.Keys(ctx, c.f)
			if err != nil || list == nil {
				t.Fatalf("list %+v: %v %v", c.f, list, err)
			}
			var ids []string
			for _, k := range list {
				ids = append(ids, k.ID)
			}
			if len(ids) != len(c.want) || (len(ids) > 0 && ids[0] != c.want[0]) {
				t.Fatalf("list %+v: %v, want %v", c.f, ids, c.want)
			}
		}
		if got, _ := s.Key(ctx, "k1"); got == nil || len(got.Spec.Models) != 2 || got.Digest != "d1b" || got.Version != 2 || got.Prev("d1") == nil {
			t.Fatalf("after a restart: %+v", got)
		}
		if got, _ := s.Key(ctx, "k2"); got == nil || !got.RevokedAt.Equal(t0.Add(3*time.Second)) || got.Version != 2 {
			t.Fatalf("a revoked key after a restart: %+v", got)
		}
	})
	runKeyVersions(t, open)
	t.Run("keys: a request's charge counts for its key's days", func(t *testing.T) {
		s := open(t, false)
		for i, id := range []string{"r1", "r2", "r3"} {
			if _, _, err := s.Claim(ctx, rec("k:"+id, id), []ledger.Event{ev(id, 1, 1, ledger.EvCreated)}); err != nil {
				t.Fatal(err)
			}
			f := finish(id, 1, 2)
			f.Charge, f.Key = int64(1000*(i+1)), "vk1"
			if id == "r3" {
				f.Key, f.At = "", t0.Add(time.Second)
			}
			if err := s.Finish(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		// A receipt stored on its own (recovery) charges its key too, once.
		rc := &ledger.StoredReceipt{Tenant: "acme", RequestID: "r4", Body: []byte(`{}`), Charge: 500, At: t0.Add(48 * time.Hour), Key: "vk1"}
		for range 2 {
			if err := s.PutReceipt(ctx, rc); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		day := ledger.Day(t0)
		if got, err := s.KeySpend(ctx, day, day); err != nil || got["vk1"] != 3000 || len(got) != 1 {
			t.Fatalf("the day: %v %v, want vk1 3000", got, err)
		}
		if got, err := s.KeySpend(ctx, day, day+2); err != nil || got["vk1"] != 3500 {
			t.Fatalf("three days: %v %v, want vk1 3500", got, err)
		}
		if spend, _ := s.Spend(ctx, day); spend["acme"] != 6000 {
			t.Fatalf("the tenant's day: %v, want 6000 (keys' charges are the tenant's too)", spend)
		}
		if got, err := s.TenantSpend(ctx, day, day+2); err != nil || got["acme"] != 6500 || len(got) != 1 {
			t.Fatalf("the tenant's three days: %v %v, want acme 6500", got, err)
		}
		// Retention deletes the receipts; a lifetime's spend stays.
		far := t0.Add(1000 * time.Hour)
		if _, err := s.Expire(ctx, far); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Sweep(ctx, far); err != nil || n == 0 {
			t.Fatalf("sweep: %d %v, want the requests' histories deleted", n, err)
		}
		from, to := ledger.SpanTotal.Days(0)
		if got, err := s.TenantSpend(ctx, from, to); err != nil || got["acme"] != 6500 {
			t.Fatalf("the tenant's lifetime after the sweep: %v %v, want acme 6500", got, err)
		}
		if got, err := s.KeySpend(ctx, from, to); err != nil || got["vk1"] != 3500 {
			t.Fatalf("the key's lifetime after the sweep: %v %v, want vk1 3500", got, err)
		}
	})
}
