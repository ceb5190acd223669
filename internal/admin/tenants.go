package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/keyring"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
)

// Teams (docs/keys-and-teams.md, "Teams") are tenants the admin API
// creates at run time: /admin/tenants and /admin/tenants/{id}. A team
// has no key of its own; keys are issued for it, and it bounds them as a
// file tenant does. Its writes are the keys' discipline: each one
// conditional write on its version (tenantWrite), ETag and If-Match, and
// a deletion — which revokes its keys — is final. The configuration
// file's tenants are listed too, read-only.

// mountTenants adds the teams' routes to m.
func (a *API) mountTenants(m *http.ServeMux) {
	m.HandleFunc("POST /admin/tenants", a.adminOnly(a.createTenant))
	m.HandleFunc("GET /admin/tenants", a.adminOnly(a.listTenants))
	m.HandleFunc("GET /admin/tenants/{id}", a.adminOnly(a.readTenant))
	m.HandleFunc("PATCH /admin/tenants/{id}", a.adminOnly(a.updateTenant))
	m.HandleFunc("DELETE /admin/tenants/{id}", a.adminOnly(a.deleteTenant))
	m.HandleFunc("/admin/tenants", api.MethodNotAllowed("GET, POST"))
	m.HandleFunc("/admin/tenants/{id}", api.MethodNotAllowed("GET, PATCH, DELETE"))
}

// tenantBody is what POST /admin/tenants and PATCH /admin/tenants/{id}
// read.
type tenantBody struct {
	ID              *string            `json:"id"`
	Name            *string            `json:"name"`
	Models          *[]string          `json:"models"`
	Budget          *ledger.KeyBudget  `json:"budget"`
	MaxDataBoundary *string            `json:"max_data_boundary"`
	Metadata        *map[string]string `json:"metadata"`
}

// TenantView is a tenant as the admin API shows it: a team ("source":
// "store"), or a tenant of the configuration file ("source": "file",
// read-only: no version, times or metadata).
type TenantView struct {
	ID              string            `json:"id"`
	Object          string            `json:"object"`
	Source          string            `json:"source"`
	Name            string            `json:"name"`
	Models          []string          `json:"models"`
	Budget          ledger.KeyBudget  `json:"budget"`
	MaxDataBoundary string            `json:"max_data_boundary"`
	Metadata        map[string]string `json:"metadata"`
	Version         int64             `json:"version,omitempty"`
	CreatedAt       *time.Time        `json:"created_at,omitempty"`
	UpdatedAt       *time.Time        `json:"updated_at,omitempty"`
	DeletedAt       *time.Time        `json:"deleted_at,omitempty"`
	// Spend is what the tenant was charged today (UTC).
	Spend *TenantSpendView `json:"spend,omitempty"`
}

// TenantSpendView is what a tenant was charged, as the admin API shows
// it.
type TenantSpendView struct {
	TodayUSD float64 `json:"today_usd"`
}

// Sources of a tenant.
const (
	SourceFile  = "file"
	SourceStore = "store"
)

func teamView(t *ledger.Tenant) TenantView {
	v := TenantView{ID: t.ID, Object: "tenant", Source: SourceStore, Name: t.Name, Models: t.Spec.Models, Budget: t.Spec.Budget,
		MaxDataBoundary: t.Spec.MaxDataBoundary, Metadata: t.Spec.Metadata, Version: t.Version,
		CreatedAt: timePtr(t.CreatedAt), UpdatedAt: timePtr(t.UpdatedAt), DeletedAt: timePtr(t.DeletedAt)}
	if v.Models == nil {
		v.Models = []string{}
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	if v.MaxDataBoundary == "" {
		v.MaxDataBoundary = gw.BoundaryExternal.String()
	}
	return v
}

func fileView(t *policy.Tenant) TenantView {
	return TenantView{ID: t.ID, Object: "tenant", Source: SourceFile, Models: []string{}, Metadata: map[string]string{},
		Budget:          ledger.KeyBudget{RequestsPerMinute: t.RequestsPerMinute, CostUSDPerDay: t.CostPerDay.USD(), MaxConcurrent: t.MaxConcurrent},
		MaxDataBoundary: t.MaxBoundary.String()}
}

// tenantIDPattern is what a team's id may be: it appears in receipts,
// metrics labels and URLs.
var tenantIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// applyTenant checks b and writes what it sets into t. Every refusal
// names its field.
func (a *API) applyTenant(t *ledger.Tenant, b *tenantBody) *api.Error {
	bad := func(param, format string, args ...any) *api.Error {
		return &api.Error{Code: api.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
	}
	if b.ID != nil && *b.ID != t.ID {
		return bad("id", "a team's id cannot change; create a new team")
	}
	if b.Name != nil {
		if len(*b.Name) > 200 {
			return bad("name", "name is longer than 200 characters")
		}
		t.Name = *b.Name
	}
	if b.Models != nil {
		models := distinct(*b.Models)
		if len(models) > MaxKeyModels {
			return bad("models", "a team lists at most %d models, not %d", MaxKeyModels, len(models))
		}
		for _, m := range models {
			if a.gw.Policy().Alias(m) == nil {
				return bad("models", "no model %q is configured", m)
			}
		}
		t.Spec.Models = models
	}
	if b.Budget != nil {
		if e := checkBudget(*b.Budget, "a team's"); e != nil {
			return e
		}
		t.Spec.Budget = *b.Budget
	}
	if b.MaxDataBoundary != nil {
		if *b.MaxDataBoundary != "" {
			if _, err := gw.ParseDataBoundary(*b.MaxDataBoundary); err != nil {
				return bad("max_data_boundary", "%v", err)
			}
		}
		t.Spec.MaxDataBoundary = *b.MaxDataBoundary
	}
	if b.Metadata != nil {
		if len(*b.Metadata) > 64 {
			return bad("metadata", "metadata has more than 64 entries")
		}
		t.Spec.Metadata = *b.Metadata
	}
	return nil
}

// checkBudget refuses a negative limit; whose names the budget's owner.
func checkBudget(bu ledger.KeyBudget, whose string) *api.Error {
	if bu.RequestsPerMinute < 0 || bu.TokensPerMinute < 0 || bu.CostUSDPerDay < 0 || bu.CostUSDPerMonth < 0 || bu.CostUSDTotal < 0 || bu.MaxConcurrent < 0 {
		return &api.Error{Code: api.CodeInvalidRequest, Param: "budget",
			Message: fmt.Sprintf("budget limits cannot be negative (0 or absent: no limit of %s own)", whose)}
	}
	for _, c := range []struct {
		name string
		usd  float64
	}{{"cost_usd_per_day", bu.CostUSDPerDay}, {"cost_usd_per_month", bu.CostUSDPerMonth}, {"cost_usd_total", bu.CostUSDTotal}} {
		if c.usd > maxCostUSD {
			return &api.Error{Code: api.CodeInvalidRequest, Param: "budget",
				Message: fmt.Sprintf("budget.%s is $%g: at most $%g (0 or absent: no limit of %s own)", c.name, c.usd, float64(maxCostUSD), whose)}
		}
	}
	return nil
}

// auditTenant logs an admin action on a team and counts it.
func (a *API) auditTenant(r *http.Request, action string, t *ledger.Tenant) {
	a.metrics.ObserveAdminAction(action)
	a.log.Info("admin action", "action", action, "by", "admin", "remote", r.RemoteAddr, "tenant", t.ID, "name", t.Name)
}

// inFile answers 409 tenant_in_file when id names a tenant of the
// configuration file.
func (a *API) inFile(id string) *api.Error {
	if a.gw.Policy().Tenant(id) == nil {
		return nil
	}
	return api.Errorf(api.CodeTenantInFile, "tenant %s is named in the configuration file, which the admin API only reads: change it there", id)
}

// createTenant answers POST /admin/tenants: 201 with the team.
func (a *API) createTenant(w http.ResponseWriter, r *http.Request) {
	var b tenantBody
	if e := api.ReadStrict(r, &b, "metadata"); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	if b.ID == nil || !tenantIDPattern.MatchString(*b.ID) {
		(&api.Error{Code: api.CodeInvalidRequest, Param: "id",
			Message: "id is required: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"}).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	if e := a.inFile(*b.ID); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	now := a.clock.Now().UTC()
	t := &ledger.Tenant{ID: *b.ID, CreatedAt: now, UpdatedAt: now}
	if e := a.applyTenant(t, &b); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	err := a.store.CreateTenant(r.Context(), t)
	switch {
	case errors.Is(err, ledger.ErrTenantExists):
		api.Errorf(api.CodeTenantExists, "a team %s exists already (a deleted team's id is not given out again)", t.ID).Write(w, provider.OpenAI, api.Meta{})
		return
	case err != nil:
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.TenantChanged(r.Context(), t.ID)
	a.auditTenant(r, "create_tenant", t)
	w.Header().Set("ETag", versionTag(t.Version))
	api.WriteJSON(w, http.StatusCreated, teamView(t))
}

// listTenants answers GET /admin/tenants: the file's tenants, then the
// teams, oldest first (deleted ones too, with their deleted_at).
func (a *API) listTenants(w http.ResponseWriter, r *http.Request) {
	teams, err := a.store.Tenants(r.Context())
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	spend, err := a.store.Spend(r.Context(), gw.Day(a.clock.Now()))
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	pol := a.gw.Policy()
	data := make([]TenantView, 0, len(pol.Tenants)+len(teams))
	for _, t := range pol.Tenants {
		v := fileView(t)
		v.Spend = &TenantSpendView{TodayUSD: gw.NanoUSD(spend[t.ID]).USD()}
		data = append(data, v)
	}
	for _, t := range teams {
		v := teamView(t)
		v.Spend = &TenantSpendView{TodayUSD: gw.NanoUSD(spend[t.ID]).USD()}
		data = append(data, v)
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// readTenant answers GET /admin/tenants/{id}, with today's spend: a
// team with its ETag, or a tenant of the file.
func (a *API) readTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	spend, err := a.store.Spend(r.Context(), gw.Day(a.clock.Now()))
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	if ft := a.gw.Policy().Tenant(id); ft != nil {
		v := fileView(ft)
		v.Spend = &TenantSpendView{TodayUSD: gw.NanoUSD(spend[id]).USD()}
		api.WriteJSON(w, http.StatusOK, v)
		return
	}
	t, e := a.readStoredTenant(r.Context(), id)
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	v := teamView(t)
	v.Spend = &TenantSpendView{TodayUSD: gw.NanoUSD(spend[id]).USD()}
	w.Header().Set("ETag", versionTag(t.Version))
	api.WriteJSON(w, http.StatusOK, v)
}

// updateTenant answers PATCH /admin/tenants/{id}: name, models, budget,
// boundary, metadata. Racing another change, the body is applied again
// to the team as that change left it (tenantWrite).
func (a *API) updateTenant(w http.ResponseWriter, r *http.Request) {
	if e := a.inFile(r.PathValue("id")); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	var b tenantBody
	if e := api.ReadStrict(r, &b, "metadata"); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	now := a.clock.Now().UTC()
	t, e := a.tenantWrite(r, func(t *ledger.Tenant) *api.Error {
		if e := a.applyTenant(t, &b); e != nil {
			return e
		}
		t.UpdatedAt = now
		return nil
	})
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.TenantChanged(r.Context(), t.ID)
	a.auditTenant(r, "update_tenant", t)
	w.Header().Set("ETag", versionTag(t.Version))
	api.WriteJSON(w, http.StatusOK, teamView(t))
}

// deleteTenant answers DELETE /admin/tenants/{id}: 204. The deletion is
// one conditional write no later change undoes; then every key of the
// team is revoked, each by the key API's conditional revocation, and
// every replica refuses them within a second — they are refused as soon
// as a replica hears the team is gone, before their own revocations.
// Its receipts stay in the store, for the admin key to read.
func (a *API) deleteTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if e := a.inFile(id); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	t, e := a.deleteStoredTenant(r, id)
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.TenantChanged(r.Context(), id)
	a.auditTenant(r, "delete_tenant", t)
	if e := a.revokeTeamKeys(r, id); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	w.Header().Set("ETag", versionTag(t.Version))
	w.WriteHeader(http.StatusNoContent)
}

// revokeTeamKeys revokes every live key of team id, each in one
// conditional write (one revoked meanwhile is revoked already).
func (a *API) revokeTeamKeys(r *http.Request, id string) *api.Error {
	live := false
	keys, err := a.store.Keys(r.Context(), ledger.KeyFilter{Tenant: id, Revoked: &live})
	if err != nil {
		return api.StoreUnavailable(err)
	}
	now := a.clock.Now().UTC()
	for _, k := range keys {
		rk, err := a.store.RevokeKey(r.Context(), k.ID, 0, now)
		switch {
		case errors.Is(err, ledger.ErrKeyRevoked):
			continue
		case err != nil:
			return api.StoreUnavailable(err)
		}
		a.gw.KeyChanged(r.Context(), rk.ID)
		a.audit(r, "revoke", rk)
	}
	return nil
}

// tenantWrite applies change to the team {id} and writes it, as keyWrite
// does a key's: conditional on the version it read, again on the team as
// another write left it, at most keyWriteTries times. A deleted team is
// 409 tenant_deleted; an If-Match the team's version does not pass, 412.
func (a *API) tenantWrite(r *http.Request, change func(t *ledger.Tenant) *api.Error) (*ledger.Tenant, *api.Error) {
	cond, e := ifMatch(r)
	if e != nil {
		return nil, e
	}
	id := r.PathValue("id")
	for range keyWriteTries {
		t, e := a.readStoredTenant(r.Context(), id)
		if e != nil {
			return nil, e
		}
		switch {
		case t.Deleted():
			return nil, tenantDeletedError(id)
		case !cond.holds(t.Version):
			return nil, tenantPreconditionError(t)
		}
		if e := change(t); e != nil {
			return nil, e
		}
		err := a.store.UpdateTenant(r.Context(), t)
		switch {
		case err == nil:
			return t, nil
		case errors.Is(err, ledger.ErrConflict):
			continue // changed meanwhile: read it again
		case errors.Is(err, ledger.ErrTenantDeleted):
			return nil, tenantDeletedError(id)
		case errors.Is(err, ledger.ErrNotFound):
			return nil, api.Errorf(api.CodeNotFound, "no tenant %q", id)
		}
		return nil, api.StoreUnavailable(err)
	}
	return nil, api.Errorf(api.CodeTenantConflict, "team %s kept changing while this change was applied (%d tries); read it and try again", id, keyWriteTries)
}

// deleteStoredTenant deletes the team id in one conditional write: at
// any version without If-Match, at the version read if it passes one. A
// team deleted already is answered as deleted (its first deletion's time
// stays).
func (a *API) deleteStoredTenant(r *http.Request, id string) (*ledger.Tenant, *api.Error) {
	cond, e := ifMatch(r)
	if e != nil {
		return nil, e
	}
	now := a.clock.Now().UTC()
	for range keyWriteTries {
		var version int64
		if cond.set {
			t, e := a.readStoredTenant(r.Context(), id)
			switch {
			case e != nil:
				return nil, e
			case t.Deleted():
				return t, nil
			case !cond.holds(t.Version):
				return nil, tenantPreconditionError(t)
			}
			version = t.Version
		}
		t, err := a.store.DeleteTenant(r.Context(), id, version, now)
		switch {
		case err == nil:
			return t, nil
		case errors.Is(err, ledger.ErrConflict):
			continue // changed since it passed If-Match: check again
		case errors.Is(err, ledger.ErrTenantDeleted):
			return a.readStoredTenant(r.Context(), id)
		case errors.Is(err, ledger.ErrNotFound):
			return nil, api.Errorf(api.CodeNotFound, "no tenant %q", id)
		}
		return nil, api.StoreUnavailable(err)
	}
	return nil, api.Errorf(api.CodeTenantConflict, "team %s kept changing while it was deleted (%d tries); try again", id, keyWriteTries)
}

// readStoredTenant reads team id: 404 when there is none.
func (a *API) readStoredTenant(ctx context.Context, id string) (*ledger.Tenant, *api.Error) {
	t, err := a.store.Tenant(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, api.Errorf(api.CodeNotFound, "no tenant %q", id)
	}
	if err != nil {
		return nil, api.StoreUnavailable(err)
	}
	return t, nil
}

// keyTenant is the tenant a key of tenant id belongs to: the file's, else
// a live team (with its models); 400 naming the field when there is
// neither.
func (a *API) keyTenant(ctx context.Context, id string) (*policy.Tenant, []string, *api.Error) {
	if t := a.gw.Policy().Tenant(id); t != nil {
		return t, nil, nil
	}
	t, err := a.store.Tenant(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		return nil, nil, api.StoreUnavailable(err)
	case t.Deleted():
		return nil, nil, &api.Error{Code: api.CodeInvalidRequest, Param: "tenant", Message: fmt.Sprintf("team %q is deleted", id)}
	default:
		return keyring.TeamTenant(t), t.Spec.Models, nil
	}
	return nil, nil, &api.Error{Code: api.CodeInvalidRequest, Param: "tenant", Message: fmt.Sprintf("no tenant %q is configured or created", id)}
}

func tenantDeletedError(id string) *api.Error {
	return api.Errorf(api.CodeTenantDeleted, "team %s is deleted, which is final: create a new team", id)
}

func tenantPreconditionError(t *ledger.Tenant) *api.Error {
	return api.Errorf(api.CodePreconditionFailed, "If-Match does not match team %s, now at %s: read it again", t.ID, versionTag(t.Version))
}
