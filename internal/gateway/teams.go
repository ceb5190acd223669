package gateway

import (
	"context"
	"slices"

	"github.com/oncegate/oncegate/internal/policy"
)

// Teams (docs/keys-and-teams.md, "Teams") are tenants kept in the store.
// The key ring finds them; here their limits join the file tenants' in
// the one tenant-limit machinery, so that a team's rate, day's cost and
// concurrency are held as a file tenant's are — before dispatch, at
// worst case, across replicas and restarts.

// tenantsInForce are the policy's tenants and the teams the key ring
// knows.
func (g *Gateway) tenantsInForce() []*policy.Tenant {
	ts := slices.Clone(g.policy().Tenants)
	if g.keys != nil {
		ts = append(ts, g.keys.Teams()...)
	}
	return ts
}

// setTenantLimits gives the tenant limits those of the tenants in force,
// and limits kept in process what the store says each was charged
// today, so that a team learnt after the start is not handed a fresh
// day.
func (g *Gateway) setTenantLimits() {
	if !g.costs.SetTenants(g.tenantsInForce()) {
		return
	}
	if err := g.costs.Seed(context.Background(), false); err != nil {
		g.log.Warn("could not read today's spend for a team's limits", "err", err)
	}
}

// tenantInForce is tenant id of the policy or a team the key ring knows;
// nil if neither has it.
func (g *Gateway) tenantInForce(id string) *policy.Tenant {
	if t := g.policy().Tenant(id); t != nil {
		return t
	}
	if g.keys != nil {
		for _, team := range g.keys.Teams() {
			if team.ID == id {
				return team
			}
		}
	}
	return nil
}
