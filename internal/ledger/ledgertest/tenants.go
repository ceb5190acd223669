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

func team(id string, at time.Time) *ledger.Tenant {
	return &ledger.Tenant{ID: id, Name: "team " + id, CreatedAt: at, UpdatedAt: at, Spec: ledger.TenantSpec{Models: []string{"chat"},
		Budget: ledger.KeyBudget{CostUSDPerDay: 2.5, RequestsPerMinute: 60}, MaxDataBoundary: "eu", Metadata: map[string]string{"cost_center": "42"}}}
}

// runTenants holds every backend to the teams' store (docs/keys-and-teams.md,
// "Teams"): created once per id, kept across a restart, every change one
// conditional write on the version, and a deletion final.
func runTenants(t *testing.T, open Opener) {
	ctx := context.Background()
	t.Run("tenants: create, read, list, update, delete, keep across a restart", func(t *testing.T) {
		s := open(t, false)
		a, b := team("team-a", t0), team("team-b", t0.Add(time.Second))
		for _, tm := range []*ledger.Tenant{b, a} {
			if err := s.CreateTenant(ctx, tm); err != nil || tm.Version != 1 {
				t.Fatalf("create %s: %v, version %d", tm.ID, err, tm.Version)
			}
		}
		if err := s.CreateTenant(ctx, team("team-a", t0)); !errors.Is(err, ledger.ErrTenantExists) {
			t.Fatalf("a taken id: %v, want ErrTenantExists", err)
		}
		got, err := s.Tenant(ctx, "team-a")
		if err != nil || got.Name != "team team-a" || got.Spec.Budget.CostUSDPerDay != 2.5 || got.Spec.Budget.RequestsPerMinute != 60 ||
			got.Spec.Models[0] != "chat" || got.Spec.MaxDataBoundary != "eu" || got.Spec.Metadata["cost_center"] != "42" ||
			!got.CreatedAt.Equal(t0) || got.Deleted() || got.Version != 1 {
			t.Fatalf("by id: %+v %v", got, err)
		}
		if _, err := s.Tenant(ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
		got.Name, got.Spec.Budget.CostUSDPerMonth, got.UpdatedAt = "renamed", 30, t0.Add(2*time.Second)
		if err := s.UpdateTenant(ctx, got); err != nil || got.Version != 2 {
			t.Fatalf("update: %v, version %d", err, got.Version)
		}
		if err := s.UpdateTenant(ctx, team("nope", t0)); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("update of an unknown team: %v", err)
		}
		del, err := s.DeleteTenant(ctx, "team-b", 0, t0.Add(3*time.Second))
		if err != nil || !del.DeletedAt.Equal(t0.Add(3*time.Second)) || del.Version != 2 || del.Name != "team team-b" {
			t.Fatalf("delete: %+v %v", del, err)
		}
		if err := s.CreateTenant(ctx, team("team-b", t0)); !errors.Is(err, ledger.ErrTenantExists) {
			t.Fatalf("a deleted team's id: %v, want ErrTenantExists", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, true)
		list, err := s.Tenants(ctx)
		if err != nil || len(list) != 2 || list[0].ID != "team-a" || list[1].ID != "team-b" {
			t.Fatalf("list after a restart, oldest first: %+v %v", list, err)
		}
		if a := list[0]; a.Name != "renamed" || a.Spec.Budget.CostUSDPerMonth != 30 || a.Version != 2 || !a.UpdatedAt.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("an updated team after a restart: %+v", a)
		}
		if b := list[1]; !b.Deleted() || b.Version != 2 {
			t.Fatalf("a deleted team after a restart: %+v", b)
		}
	})
	t.Run("tenants: a write based on a replaced version changes nothing", func(t *testing.T) {
		s := open(t, false)
		tm := team("tv", t0)
		if err := s.CreateTenant(ctx, tm); err != nil {
			t.Fatal(err)
		}
		stale := *tm
		tm.Name = "renamed"
		if err := s.UpdateTenant(ctx, tm); err != nil || tm.Version != 2 {
			t.Fatalf("update at the stored version: %v, version %d", err, tm.Version)
		}
		stale.Spec.Models = []string{"other"}
		if err := s.UpdateTenant(ctx, &stale); !errors.Is(err, ledger.ErrConflict) || stale.Version != 1 {
			t.Fatalf("update at a replaced version: %v (version %d), want ErrConflict", err, stale.Version)
		}
		if _, err := s.DeleteTenant(ctx, "tv", 1, t0.Add(time.Second)); !errors.Is(err, ledger.ErrConflict) {
			t.Fatalf("deletion at a replaced version: %v, want ErrConflict", err)
		}
		got, err := s.Tenant(ctx, "tv")
		if err != nil || got.Name != "renamed" || got.Spec.Models[0] != "chat" || got.Version != 2 || got.Deleted() {
			t.Fatalf("after two refused writes: %+v %v", got, err)
		}
		if _, err := s.DeleteTenant(ctx, "tv", 2, t0.Add(time.Second)); err != nil {
			t.Fatalf("deletion at the stored version: %v", err)
		}
		if _, err := s.DeleteTenant(ctx, "tv", 0, t0.Add(time.Hour)); !errors.Is(err, ledger.ErrTenantDeleted) {
			t.Fatalf("a second deletion: %v, want ErrTenantDeleted", err)
		}
		got.Name = "back"
		if err := s.UpdateTenant(ctx, got); !errors.Is(err, ledger.ErrTenantDeleted) {
			t.Fatalf("an update of a deleted team: %v, want ErrTenantDeleted", err)
		}
		if got, _ := s.Tenant(ctx, "tv"); !got.DeletedAt.Equal(t0.Add(time.Second)) || got.Name != "renamed" || got.Version != 3 {
			t.Fatalf("the first deletion stays: %+v", got)
		}
		if _, err := s.DeleteTenant(ctx, "nope", 0, t0); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("deletion of an unknown team: %v", err)
		}
	})
	t.Run("tenants: a deletion racing an update is never undone", func(t *testing.T) {
		s := open(t, false)
		for i := range 16 {
			id := fmt.Sprintf("tx%d", i)
			tm := team(id, t0)
			if err := s.CreateTenant(ctx, tm); err != nil {
				t.Fatal(err)
			}
			var upd, del error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				c := *tm
				c.Name = "updated"
				upd = s.UpdateTenant(ctx, &c)
			}()
			go func() { defer wg.Done(); _, del = s.DeleteTenant(ctx, id, 0, t0.Add(time.Second)) }()
			wg.Wait()
			got, err := s.Tenant(ctx, id)
			switch {
			case err != nil || del != nil:
				t.Fatalf("%s: delete %v, read %v", id, del, err)
			case !got.Deleted():
				t.Fatalf("%s: the update (%v) undid the deletion", id, upd)
			case upd == nil && (got.Name != "updated" || got.Version != 3):
				t.Fatalf("%s: the update succeeded, yet the team is %+v", id, got)
			case upd != nil && !errors.Is(upd, ledger.ErrTenantDeleted):
				t.Fatalf("%s: the update after the deletion: %v, want ErrTenantDeleted", id, upd)
			}
		}
	})
}
