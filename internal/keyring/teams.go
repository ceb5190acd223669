package keyring

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/quota"
)

// Teams (docs/keys-and-teams.md, "Teams") are tenants kept in the store
// rather than the configuration file. A request reaches one only through
// a virtual key issued for it: the key's tenant is found in the policy
// first, else among the teams, which the ring caches by id beside the
// keys and empties of a team as soon as the key feed says it changed
// (its id is sent on the feed as TeamChange + id). A team becomes a
// *policy.Tenant, so that its limits are the file tenants' machinery's.

// TeamChange prefixes a team's id on the key feed.
const TeamChange = "tenant:"

// team is a cached team: nil tenant when the store has none of that id,
// or it is deleted.
type team struct {
	stored *ledger.Tenant
	tenant *policy.Tenant
	models map[string]bool // nil: every model
}

// TeamTenant is team t as the request path and the limits take a
// tenant: its boundary (external when it names none), rate, day's cost
// and concurrency. (Its tokens per minute are held beside its keys':
// TeamTokens.)
func TeamTenant(t *ledger.Tenant) *policy.Tenant {
	b := t.Spec.Budget
	pt := &policy.Tenant{ID: t.ID, MaxBoundary: gw.BoundaryExternal, RequestsPerMinute: b.RequestsPerMinute,
		CostPerDay: gw.NanoFromUSD(b.CostUSDPerDay), CostPerMonth: gw.NanoFromUSD(b.CostUSDPerMonth), CostTotal: gw.NanoFromUSD(b.CostUSDTotal),
		MaxConcurrent: b.MaxConcurrent}
	if bd, err := gw.ParseDataBoundary(t.Spec.MaxDataBoundary); err == nil {
		pt.MaxBoundary = bd
	}
	return pt
}

// newLimiting is an empty Ring.limiting.
func newLimiting() map[string]*policy.Tenant { return map[string]*policy.Tenant{} }

// TeamChanged drops team id here and tells the other replicas.
func (s *Ring) TeamChanged(ctx context.Context, id string) { s.Changed(ctx, TeamChange+id) }

// forgetTeams drops the teams the feed's ids name from the cache; s.mu
// is held. Their limits stay until the next read replaces them, so that
// a request that found its team just before is still held by them.
func (s *Ring) forgetTeams(ids []string, all bool) {
	if all {
		clear(s.teams)
		return
	}
	for _, id := range ids {
		if t, ok := strings.CutPrefix(id, TeamChange); ok {
			delete(s.teams, t)
		}
	}
}

// team returns the team id as cached, reading it from the store when it
// is not; nil entry's tenant when there is no live team of that id.
func (s *Ring) team(ctx context.Context, id string) (*team, error) {
	s.mu.RLock()
	tm, gen := s.teams[id], s.gen
	s.mu.RUnlock()
	if tm != nil {
		return tm, nil
	}
	stored, err := s.store.Tenant(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		tm = &team{}
	case err != nil:
		return nil, fmt.Errorf("read team %s: %w", id, err)
	case stored.Deleted():
		tm = &team{stored: stored}
	default:
		tm = &team{stored: stored, tenant: TeamTenant(stored)}
		if len(stored.Spec.Models) > 0 {
			tm.models = make(map[string]bool, len(stored.Spec.Models))
			for _, m := range stored.Spec.Models {
				tm.models[m] = true
			}
		}
	}
	s.mu.Lock()
	if s.gen == gen {
		s.teams[id] = tm
	}
	old, had := s.limiting[id]
	changed := had != (tm.tenant != nil) || had && *old != *tm.tenant
	if tm.tenant != nil {
		s.limiting[id] = tm.tenant
		// tokens_per_minute, which file tenants do not have, is held as a
		// key's is, under the team's own name.
		s.setLimited(TeamChange+id, [4]quota.Tenant{2: {CostPerDay: gw.NanoUSD(tm.stored.Spec.Budget.TokensPerMinute)}})
	} else {
		delete(s.limiting, id)
	}
	s.mu.Unlock()
	if changed {
		s.teamLimits()
	}
	return tm, nil
}

// Teams are the live teams the ring has read, as tenants, each as last
// read.
func (s *Ring) Teams() []*policy.Tenant {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*policy.Tenant, 0, len(s.limiting))
	for _, t := range s.limiting {
		out = append(out, t)
	}
	return out
}

// OnTeams sets what is called when a read changes what Teams answers: a
// team learnt, changed, or found deleted. The tenants' limits are then
// made again of the policy's tenants and Teams.
func (s *Ring) OnTeams(f func()) {
	s.mu.Lock()
	s.onTeams = f
	s.mu.Unlock()
}

// teamLimits calls the OnTeams function, if any.
func (s *Ring) teamLimits() {
	s.mu.RLock()
	f := s.onTeams
	s.mu.RUnlock()
	if f != nil {
		f()
	}
}

// TeamTokens names the limit of the tokens per minute of key lk's team
// in the Limits' Tokens (TeamChange + the team's id), and what it is (0:
// none, or the key's tenant is no team).
func (s *Ring) TeamTokens(lk *Key) (id string, perMinute int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if tm := s.teams[lk.Stored.Tenant]; tm != nil && tm.stored != nil {
		perMinute = tm.stored.Spec.Budget.TokensPerMinute
	}
	return TeamChange + lk.Stored.Tenant, perMinute
}

// teamAllows reports whether the key's team (if its tenant is one) lets
// it use model alias; the refusal names the team's models.
func (s *Ring) teamAllows(lk *Key, alias string) *api.Error {
	s.mu.RLock()
	tm := s.teams[lk.Stored.Tenant]
	s.mu.RUnlock()
	if tm == nil || tm.models == nil || tm.models[alias] {
		return nil
	}
	return &api.Error{Code: api.CodeModelNotAllowed, Param: "model",
		Message: fmt.Sprintf("team %s may not use model `%s` (its models: %v)", lk.Stored.Tenant, alias, tm.stored.Spec.Models)}
}
