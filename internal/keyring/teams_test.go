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

// A key's tenant that the policy lacks is found among the teams: as a
// tenant with the team's limits and boundary, its models gating the key;
// the ring keeps it until told it changed, then reads it again — and a
// deleted team's key has no tenant.
func TestTheRingFindsAKeysTeam(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	st := memory.New(0)
	deployment := []byte("deployment-secret")
	tm := &ledger.Tenant{ID: "team-a", CreatedAt: now, UpdatedAt: now, Spec: ledger.TenantSpec{Models: []string{"chat"},
		Budget: ledger.KeyBudget{RequestsPerMinute: 7, CostUSDPerDay: 2, MaxConcurrent: 3, TokensPerMinute: 900}, MaxDataBoundary: "private"}}
	if err := st.CreateTenant(ctx, tm); err != nil {
		t.Fatal(err)
	}
	secret, _ := vkey.New()
	k := &ledger.Key{ID: vkey.NewID(), Tenant: "team-a", Digest: vkey.Digest(deployment, secret), CreatedAt: now}
	if err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	pol := &policy.Policy{Tenants: []*policy.Tenant{{ID: "acme", MaxBoundary: gw.BoundaryExternal}}}
	ring := New(st, clock.NewFake(now), slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(nil), deployment,
		func() *policy.Policy { return pol }, Limits{}, nil)
	told := 0
	ring.OnTeams(func() { told++ })
	lk, err := ring.Lookup(ctx, secret)
	if err != nil || lk == nil {
		t.Fatal(lk, err)
	}
	ten, err := ring.Tenant(ctx, lk)
	if err != nil || ten == nil || ten.ID != "team-a" || ten.RequestsPerMinute != 7 || ten.CostPerDay != gw.NanoFromUSD(2) ||
		ten.MaxConcurrent != 3 || ten.MaxBoundary != gw.BoundaryPrivate {
		t.Fatalf("the key's team as a tenant: %+v %v", ten, err)
	}
	if told != 1 || len(ring.Teams()) != 1 {
		t.Fatalf("the gateway told %d times, teams %v", told, ring.Teams())
	}
	if id, n := ring.TeamTokens(lk); id != TeamChange+"team-a" || n != 900 {
		t.Fatalf("team tokens: %s %d", id, n)
	}
	if e := ring.Gate(lk, "other"); e == nil || e.Code != api.CodeModelNotAllowed {
		t.Fatalf("a model outside the team: %v", e)
	}
	if e := ring.Gate(lk, "chat"); e != nil {
		t.Fatalf("a model of the team: %v", e)
	}
	// Changed in the store: the ring keeps what it read until told.
	tm.Spec.Budget.RequestsPerMinute = 9
	if err := st.UpdateTenant(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if ten, _ := ring.Tenant(ctx, lk); ten.RequestsPerMinute != 7 {
		t.Fatalf("read again before being told: %d", ten.RequestsPerMinute)
	}
	ring.Forget([]string{TeamChange + "team-a"}, false)
	if ten, _ := ring.Tenant(ctx, lk); ten == nil || ten.RequestsPerMinute != 9 {
		t.Fatalf("after the change was told: %+v", ten)
	}
	if _, err := st.DeleteTenant(ctx, "team-a", 0, now); err != nil {
		t.Fatal(err)
	}
	ring.Forget([]string{TeamChange + "team-a"}, false)
	if ten, err := ring.Tenant(ctx, lk); ten != nil || err != nil {
		t.Fatalf("a deleted team's key has a tenant: %+v %v", ten, err)
	}
	if len(ring.Teams()) != 0 {
		t.Fatalf("a deleted team is still among the teams: %v", ring.Teams())
	}
}
