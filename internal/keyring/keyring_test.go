package keyring

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/vkey"
)

// countingStore counts the store reads by digest.
type countingStore struct {
	*memory.Store
	reads int
}

func (s *countingStore) KeyByDigest(ctx context.Context, d string) (*ledger.Key, error) {
	s.reads++
	return s.Store.KeyByDigest(ctx, d)
}

// A key is read from the store once and then found in the cache; an
// unknown secret is remembered as unknown; a change (here or from the
// feed) empties the cache of it, so a revocation holds at the next
// request; expiry is checked against the clock on every lookup; the
// key's tenant is narrowed by its boundary and models.
func TestTheRingCachesKeysUntilTheyChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	st := &countingStore{Store: memory.New(0)}
	deployment := []byte("deployment-secret")
	secret, display := vkey.New()
	k := &ledger.Key{ID: vkey.NewID(), Tenant: "acme", Digest: vkey.Digest(deployment, secret), Prefix: display,
		Spec: ledger.KeySpec{Models: []string{"chat"}, MaxDataBoundary: "private"}, ExpiresAt: now.Add(time.Hour), CreatedAt: now, Version: 1}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	pol := &policy.Policy{Tenants: []*policy.Tenant{{ID: "acme", MaxBoundary: gw.BoundaryExternal}}}
	ring := New(st, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(nil), deployment, func() *policy.Policy { return pol }, Limits{}, nil)

	for range 3 {
		lk, err := ring.Lookup(ctx, secret)
		if err != nil || lk == nil || lk.Stored.ID != k.ID {
			t.Fatalf("lookup: %v %v", lk, err)
		}
	}
	if st.reads != 1 {
		t.Errorf("%d store reads for three lookups, want 1", st.reads)
	}
	lk, _ := ring.Lookup(ctx, secret)
	if !lk.Allows("chat") || lk.Allows("other") {
		t.Error("the key's models do not narrow it")
	}
	if ten, err := ring.Tenant(context.Background(), lk); err != nil || ten == nil || ten.MaxBoundary != lk.Boundary || lk.Boundary == 0 {
		t.Errorf("tenant %+v not narrowed to the key's boundary %v", ten, lk.Boundary)
	}

	unknown, _ := vkey.New()
	for range 2 {
		if lk, err := ring.Lookup(ctx, unknown); lk != nil || err != nil {
			t.Fatalf("an unknown secret: %v %v", lk, err)
		}
	}
	if st.reads != 2 {
		t.Errorf("an unknown secret read %d times, want once", st.reads-1)
	}
	if lk, _ := ring.Lookup(ctx, "not-a-key"); lk != nil || st.reads != 2 {
		t.Error("a secret that is no virtual key's shape went to the store")
	}

	if _, err := st.RevokeKey(ctx, k.ID, 1, now); err != nil {
		t.Fatal(err)
	}
	if lk, _ := ring.Lookup(ctx, secret); lk == nil {
		t.Fatal("the cache was emptied without being told")
	}
	ring.Changed(ctx, k.ID)
	if lk, _ := ring.Lookup(ctx, secret); lk != nil {
		t.Error("a revoked key still authenticates after Changed")
	}

	k2secret, _ := vkey.New()
	k2 := &ledger.Key{ID: vkey.NewID(), Tenant: "acme", Digest: vkey.Digest(deployment, k2secret), ExpiresAt: now.Add(time.Minute), CreatedAt: now, Version: 1}
	if err := st.CreateKey(ctx, k2); err != nil {
		t.Fatal(err)
	}
	ring.Forget(nil, true) // the feed could not tell which: forget all, the unknown digests too
	if lk, _ := ring.Lookup(ctx, k2secret); lk == nil {
		t.Fatal("a new key is not found")
	}
	clk.Advance(time.Minute)
	if lk, _ := ring.Lookup(ctx, k2secret); lk != nil {
		t.Error("an expired key still authenticates")
	}
}

// Gate refuses a model outside the key's list and a key over its rate;
// Enter refuses a request over the key's max_concurrent until one ends.
func TestTheRingGatesAKeysModelsRateAndConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	st := memory.New(0)
	deployment := []byte("deployment-secret")
	secret, _ := vkey.New()
	k := &ledger.Key{ID: vkey.NewID(), Tenant: "acme", Digest: vkey.Digest(deployment, secret), CreatedAt: now, Version: 1,
		Spec: ledger.KeySpec{Models: []string{"chat"}, Budget: ledger.KeyBudget{RequestsPerMinute: 2, MaxConcurrent: 1}}}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	pol := &policy.Policy{Tenants: []*policy.Tenant{{ID: "acme", MaxBoundary: gw.BoundaryExternal}}}
	ring := New(st, clock.NewFake(now), slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(nil), deployment,
		func() *policy.Policy { return pol }, Limits{}, nil)
	lk, err := ring.Lookup(ctx, secret)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	if e := ring.Gate(lk, "other"); e == nil || e.Code != api.CodeModelNotAllowed {
		t.Errorf("another model: %v", e)
	}
	for i := range 2 {
		if e := ring.Gate(lk, "chat"); e != nil {
			t.Fatalf("request %d within the rate: %v", i+1, e)
		}
	}
	if e := ring.Gate(lk, "chat"); e == nil || e.Code != api.CodeKeyRateLimited || e.RetryAfter < 1 {
		t.Errorf("a third request in the minute: %+v", e)
	}
	release, e := ring.Enter(lk)
	if e != nil {
		t.Fatal(e)
	}
	if _, e := ring.Enter(lk); e == nil || e.Code != api.CodeKeyConcurrency {
		t.Errorf("a second request in progress: %v", e)
	}
	release()
	if release, e := ring.Enter(lk); e != nil {
		t.Errorf("after the first ended: %v", e)
	} else {
		release()
	}
}
