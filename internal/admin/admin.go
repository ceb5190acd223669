// Package admin is oncegate's admin API (docs/keys-and-teams.md): it owns the
// routes /admin/keys, /admin/keys/{id} and /admin/keys/{id}/rotate —
// virtual keys issued, listed, read, changed, revoked and rotated at run
// time — /admin/tenants and /admin/tenants/{id} — teams, tenants created
// at run time (tenants.go) — and /admin/spend, the spend report, all behind the admin key
// (admin_key_env). Bodies are strict JSON: an unknown field, a wrong type
// or a member given twice is a 400 naming it. Every change to a key is
// one conditional write on its version (keyWrite), so racing admin calls
// never lose each other's change and a revocation is final. Every action
// is one audit log line (who, what, which key — never a secret) and a
// count in oncegate_admin_actions_total.
//
// It knows the running gateway only through Gateway, and the ledger
// through ledger.Store: it does not import internal/gateway.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/vkey"
)

// Mount adds the admin API's routes to m: /admin/keys, /admin/keys/{id},
// /admin/keys/{id}/rotate and /admin/spend, each with its 405 for the
// other methods.
func (a *API) Mount(m *http.ServeMux) {
	m.HandleFunc("POST /admin/keys", a.adminOnly(a.issueKey))
	m.HandleFunc("GET /admin/keys", a.adminOnly(a.listKeys))
	m.HandleFunc("GET /admin/keys/{id}", a.adminOnly(a.readKey))
	m.HandleFunc("PATCH /admin/keys/{id}", a.adminOnly(a.updateKey))
	m.HandleFunc("DELETE /admin/keys/{id}", a.adminOnly(a.revokeKey))
	m.HandleFunc("POST /admin/keys/{id}/rotate", a.adminOnly(a.rotateKey))
	m.HandleFunc("GET /admin/spend", a.adminOnly(a.serveSpend))
	a.mountTenants(m)
	for path, allow := range map[string]string{"/admin/keys": "GET, POST", "/admin/keys/{id}": "GET, PATCH, DELETE",
		"/admin/keys/{id}/rotate": "POST", "/admin/spend": "GET"} {
		m.HandleFunc(path, api.MethodNotAllowed(allow))
	}
}

// adminOnly lets the admin key through; a tenant's key or a virtual key
// is 403, anything else 401.
func (a *API) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !a.gw.AdminEnabled():
			api.Errorf(api.CodeUnauthorized, "the admin API is off: set admin_key_env (or admin_key_file)").Write(w, provider.OpenAI, api.Meta{})
		case a.gw.IsAdmin(r):
			h(w, r)
		case a.gw.IsTenant(r):
			api.Errorf(api.CodeForbidden, "the admin API needs the admin key; a tenant's or a virtual key may not use it").Write(w, provider.OpenAI, api.Meta{})
		default:
			api.Errorf(api.CodeUnauthorized, "the admin API needs the admin key (admin_key_env)").Write(w, provider.OpenAI, api.Meta{})
		}
	}
}

// keyBody is what POST /admin/keys and PATCH /admin/keys/{id} read.
type keyBody struct {
	Tenant          *string            `json:"tenant"`
	Name            *string            `json:"name"`
	Models          *[]string          `json:"models"`
	Budget          *ledger.KeyBudget  `json:"budget"`
	MaxDataBoundary *string            `json:"max_data_boundary"`
	ExpiresAt       *string            `json:"expires_at"`
	Metadata        *map[string]string `json:"metadata"`
	// DropParams is true, false or null (the tenant's again); absent:
	// unchanged.
	DropParams  json.RawMessage `json:"drop_params"`
	KeylessJoin optBool         `json:"keyless_join"`
}

// optBool is a member that may be absent (no change), null (unset) or
// true or false.
type optBool struct {
	sent bool
	v    *bool
}

// UnmarshalJSON reads true, false or null.
func (o *optBool) UnmarshalJSON(b []byte) error {
	o.sent = true
	if err := json.Unmarshal(b, &o.v); err != nil {
		return errors.New("keyless_join must be true, false or null (null: the alias's or the configuration's)")
	}
	return nil
}

// KeyView is a key as the admin API shows it; Key (the secret) only on
// issue and rotate.
type KeyView struct {
	ID              string            `json:"id"`
	Object          string            `json:"object"`
	Key             string            `json:"key,omitempty"`
	Prefix          string            `json:"prefix"`
	Tenant          string            `json:"tenant"`
	Name            string            `json:"name"`
	Models          []string          `json:"models"`
	Budget          ledger.KeyBudget  `json:"budget"`
	MaxDataBoundary string            `json:"max_data_boundary,omitempty"`
	ExpiresAt       *time.Time        `json:"expires_at"`
	Metadata        map[string]string `json:"metadata"`
	// DropParams is the key's drop_params; absent: its tenant's.
	DropParams *bool `json:"drop_params,omitempty"`
	// KeylessJoin is the key's own keyless_join; absent: the alias's, or
	// the configuration's (docs/identity.md).
	KeylessJoin *bool      `json:"keyless_join,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
	// Version counts the key's changes; its ETag is made of it.
	Version int64 `json:"version"`
	// Previous are the secrets rotations replaced that still work, each
	// until its own end; PreviousValidUntil is the last of those ends
	// (both absent when none works).
	Previous           []PrevView `json:"previous,omitempty"`
	PreviousValidUntil *time.Time `json:"previous_valid_until,omitempty"`
	// Spend is what the key was charged today and this month (UTC).
	Spend *KeySpendView `json:"spend,omitempty"`
}

// PrevView is a previous secret as the admin API shows it.
type PrevView struct {
	Prefix     string    `json:"prefix"`
	ValidUntil time.Time `json:"valid_until"`
}

// KeySpendView is what a key was charged, as the admin API shows it.
type KeySpendView struct {
	TodayUSD float64 `json:"today_usd"`
	MonthUSD float64 `json:"month_usd"`
	// TotalUSD is what the key was charged over its life.
	TotalUSD float64 `json:"total_usd"`
}

// maxCostUSD is the largest cost limit a key may set, as for a tenant in
// the file: nano-USD amounts are int64s.
const maxCostUSD = 1e9

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func viewOf(k *ledger.Key, now time.Time) KeyView {
	v := KeyView{ID: k.ID, Object: "key", Prefix: k.Prefix, Tenant: k.Tenant, Name: k.Name, Models: k.Spec.Models, Budget: k.Spec.Budget,
		MaxDataBoundary: k.Spec.MaxDataBoundary, ExpiresAt: timePtr(k.ExpiresAt), Metadata: k.Spec.Metadata, DropParams: k.Spec.DropParams,
		KeylessJoin: k.Spec.KeylessJoin, CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, RevokedAt: timePtr(k.RevokedAt), Version: k.Version}
	if !k.Revoked() {
		for _, p := range k.LivePrevious(now) {
			v.Previous = append(v.Previous, PrevView{Prefix: p.Prefix, ValidUntil: p.Until})
			if v.PreviousValidUntil == nil || p.Until.After(*v.PreviousValidUntil) {
				v.PreviousValidUntil = timePtr(p.Until)
			}
		}
	}
	if v.Models == nil {
		v.Models = []string{}
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	return v
}

// MaxKeyModels bounds a key's models list (after duplicates are
// dropped).
const MaxKeyModels = 256

// distinct is list without its repeats, in the order of first sight.
func distinct(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := make([]string, 0, len(list))
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// apply checks b and writes what it sets into k (issue: the tenant
// too). Every refusal names its field. The tenant is the file's or a
// team (docs/keys-and-teams.md, "Teams"), whose models and boundary the
// key may narrow, never widen.
func (a *API) apply(ctx context.Context, k *ledger.Key, b *keyBody, issue bool, now time.Time) *api.Error {
	bad := func(param, format string, args ...any) *api.Error {
		return &api.Error{Code: api.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
	}
	pol := a.gw.Policy()
	if issue {
		if b.Tenant == nil || *b.Tenant == "" {
			return bad("tenant", "tenant is required: the configured tenant or the team the key belongs to")
		}
		k.Tenant = *b.Tenant
	} else if b.Tenant != nil && *b.Tenant != k.Tenant {
		return bad("tenant", "a key's tenant cannot change; issue a new key")
	}
	tenant, teamModels, e := a.keyTenant(ctx, k.Tenant)
	if e != nil {
		return e
	}
	if b.Name != nil {
		if len(*b.Name) > 200 {
			return bad("name", "name is longer than 200 characters")
		}
		k.Name = *b.Name
	}
	if b.Models != nil {
		models := distinct(*b.Models)
		if len(models) > MaxKeyModels {
			return bad("models", "a key lists at most %d models, not %d", MaxKeyModels, len(models))
		}
		for _, m := range models {
			if pol.Alias(m) == nil {
				return bad("models", "no model %q is configured", m)
			}
			if len(teamModels) > 0 && !slices.Contains(teamModels, m) {
				return bad("models", "a key may narrow its team, never widen it: team %s's models do not name %q", k.Tenant, m)
			}
		}
		k.Spec.Models = models
	}
	if b.Budget != nil {
		if e := checkBudget(*b.Budget, "the key's"); e != nil {
			return e
		}
		k.Spec.Budget = *b.Budget
	}
	if b.MaxDataBoundary != nil {
		if *b.MaxDataBoundary != "" {
			bd, err := gw.ParseDataBoundary(*b.MaxDataBoundary)
			if err != nil {
				return bad("max_data_boundary", "%v", err)
			}
			if bd > tenant.MaxBoundary {
				return bad("max_data_boundary", "a key may narrow its tenant, never widen it: tenant %s's boundary is %s", k.Tenant, tenant.MaxBoundary)
			}
		}
		k.Spec.MaxDataBoundary = *b.MaxDataBoundary
	}
	if b.ExpiresAt != nil {
		k.ExpiresAt = time.Time{}
		if *b.ExpiresAt != "" {
			at, err := time.Parse(time.RFC3339, *b.ExpiresAt)
			if err != nil {
				return bad("expires_at", "expires_at is not an RFC 3339 time: %v", err)
			}
			if !at.After(now) {
				return bad("expires_at", "expires_at is in the past")
			}
			k.ExpiresAt = at.UTC()
		}
	}
	if b.Metadata != nil {
		if len(*b.Metadata) > 64 {
			return bad("metadata", "metadata has more than 64 entries")
		}
		k.Spec.Metadata = *b.Metadata
	}
	if len(b.DropParams) > 0 {
		switch string(bytes.TrimSpace(b.DropParams)) {
		case "null":
			k.Spec.DropParams = nil
		case "true", "false":
			drop := string(bytes.TrimSpace(b.DropParams)) == "true"
			k.Spec.DropParams = &drop
		default:
			return bad("drop_params", "drop_params must be true, false or null (its tenant's), found %s", b.DropParams)
		}
	}
	if b.KeylessJoin.sent {
		k.Spec.KeylessJoin = b.KeylessJoin.v
	}
	return nil
}

// audit logs an admin action and counts it.
func (a *API) audit(r *http.Request, action string, k *ledger.Key) {
	a.metrics.ObserveAdminAction(action)
	a.log.Info("admin action", "action", action, "by", "admin", "remote", r.RemoteAddr, "key_id", k.ID, "tenant", k.Tenant, "name", k.Name)
}

// issueKey answers POST /admin/keys: 201 with the secret, shown once.
func (a *API) issueKey(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if e := api.ReadStrict(r, &b, "metadata"); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	now := a.clock.Now().UTC()
	secret, display := vkey.New()
	k := &ledger.Key{ID: vkey.NewID(), Digest: vkey.Digest(a.secret, secret), Prefix: display, CreatedAt: now, UpdatedAt: now}
	if e := a.apply(r.Context(), k, &b, true, now); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	if err := a.store.CreateKey(r.Context(), k); err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.KeyChanged(r.Context(), k.ID)
	a.audit(r, "issue", k)
	v := viewOf(k, now)
	v.Key = secret
	w.Header().Set("ETag", etagOf(k))
	api.WriteJSON(w, http.StatusCreated, v)
}

// listKeys answers GET /admin/keys?tenant=&name=&revoked=.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := ledger.KeyFilter{Tenant: q.Get("tenant"), Name: q.Get("name")}
	switch q.Get("revoked") {
	case "":
	case "true", "false":
		v := q.Get("revoked") == "true"
		f.Revoked = &v
	default:
		(&api.Error{Code: api.CodeInvalidRequest, Param: "revoked", Message: "revoked must be true or false"}).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	list, err := a.store.Keys(r.Context(), f)
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	spend, err := a.keySpends(r.Context())
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	now := a.clock.Now()
	data := make([]KeyView, len(list))
	for i, k := range list {
		data[i] = viewOf(k, now)
		data[i].Spend = spend.of(k.ID)
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// keySpend is what each key was charged today, this month and over its
// life, in nano-USD.
type keySpend struct{ today, month, total map[string]int64 }

// of is key id's spend as the API shows it.
func (s keySpend) of(id string) *KeySpendView {
	return &KeySpendView{TodayUSD: gw.NanoUSD(s.today[id]).USD(), MonthUSD: gw.NanoUSD(s.month[id]).USD(),
		TotalUSD: gw.NanoUSD(s.total[id]).USD()}
}

// keySpends is what each key was charged today, this month and over its
// life.
func (a *API) keySpends(ctx context.Context) (s keySpend, err error) {
	now := a.clock.Now()
	if s.today, err = a.store.KeySpend(ctx, gw.Day(now), gw.Day(now)); err != nil {
		return s, fmt.Errorf("read the keys' spend today: %w", err)
	}
	if s.month, err = a.store.KeySpend(ctx, ledger.MonthStart(now), gw.Day(now)); err != nil {
		return s, fmt.Errorf("read the keys' spend this month: %w", err)
	}
	from, to := ledger.SpanTotal.Days(0)
	if s.total, err = a.store.KeySpend(ctx, from, to); err != nil {
		return s, fmt.Errorf("read the keys' lifetime spend: %w", err)
	}
	return s, nil
}

// storedKey reads the key {id}, or answers 404.
func (a *API) storedKey(w http.ResponseWriter, r *http.Request) *ledger.Key {
	k, e := a.readStoredKey(r, r.PathValue("id"))
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return nil
	}
	return k
}

// readKey answers GET /admin/keys/{id}, with its spend.
func (a *API) readKey(w http.ResponseWriter, r *http.Request) {
	k := a.storedKey(w, r)
	if k == nil {
		return
	}
	spend, err := a.keySpends(r.Context())
	if err != nil {
		api.StoreUnavailable(err).Write(w, provider.OpenAI, api.Meta{})
		return
	}
	v := viewOf(k, a.clock.Now())
	v.Spend = spend.of(k.ID)
	w.Header().Set("ETag", etagOf(k))
	api.WriteJSON(w, http.StatusOK, v)
}

// updateKey answers PATCH /admin/keys/{id}: name, models, budget,
// boundary, expiry, metadata. Racing another change, the body is
// applied again to the key as that change left it (keyWrite).
func (a *API) updateKey(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if e := api.ReadStrict(r, &b, "metadata"); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	now := a.clock.Now().UTC()
	k, e := a.keyWrite(r, func(k *ledger.Key) *api.Error {
		if e := a.apply(r.Context(), k, &b, false, now); e != nil {
			return e
		}
		k.UpdatedAt = now
		return nil
	})
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.KeyChanged(r.Context(), k.ID)
	a.audit(r, "update", k)
	w.Header().Set("ETag", etagOf(k))
	api.WriteJSON(w, http.StatusOK, viewOf(k, now))
}

// revokeKey answers DELETE /admin/keys/{id}: 204, and the key is refused
// on every replica within a second. The revocation is one conditional
// write no later change undoes; a key revoked already is 204 too.
func (a *API) revokeKey(w http.ResponseWriter, r *http.Request) {
	k, e := a.revoke(r)
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.KeyChanged(r.Context(), k.ID)
	a.audit(r, "revoke", k)
	w.Header().Set("ETag", etagOf(k))
	w.WriteHeader(http.StatusNoContent)
}

// rotateKey answers POST /admin/keys/{id}/rotate {"grace": "10m"}: a new
// secret, shown once; the old one keeps working for grace (default 0),
// and the secrets earlier rotations replaced keep their own ends. Of two
// rotations racing, one wins: the other finds the secret it was to
// replace gone and answers 409 key_conflict.
func (a *API) rotateKey(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Grace string `json:"grace"`
	}
	if e := api.ReadStrict(r, &b); e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	var grace time.Duration
	if b.Grace != "" {
		d, err := time.ParseDuration(b.Grace)
		if err != nil || d < 0 {
			(&api.Error{Code: api.CodeInvalidRequest, Param: "grace", Message: "grace must be a duration such as \"10m\" (0 or absent: the old secret stops now)"}).Write(w, provider.OpenAI, api.Meta{})
			return
		}
		grace = d
	}
	now := a.clock.Now().UTC()
	secret, display := vkey.New()
	replaced := "" // the secret this rotation replaces: the first one read
	k, e := a.keyWrite(r, func(k *ledger.Key) *api.Error {
		if replaced == "" {
			replaced = k.Digest
		} else if k.Digest != replaced {
			return api.Errorf(api.CodeKeyConflict, "key %s was rotated by another request meanwhile; read it and rotate again if you still need to", k.ID)
		}
		prev := k.LivePrevious(now)
		if grace > 0 {
			if len(prev) >= ledger.MaxPrevious {
				return &api.Error{Code: api.CodeInvalidRequest, Param: "grace", Message: fmt.Sprintf("key %s already has %d previous secrets in their grace: rotate with no grace, or once one ends", k.ID, len(prev))}
			}
			prev = append(prev, ledger.PrevSecret{Digest: k.Digest, Prefix: k.Prefix, Until: now.Add(grace)})
		}
		k.Previous = prev
		k.Digest, k.Prefix, k.UpdatedAt = vkey.Digest(a.secret, secret), display, now
		return nil
	})
	if e != nil {
		e.Write(w, provider.OpenAI, api.Meta{})
		return
	}
	a.gw.KeyChanged(r.Context(), k.ID)
	a.audit(r, "rotate", k)
	v := viewOf(k, now)
	v.Key = secret
	w.Header().Set("ETag", etagOf(k))
	api.WriteJSON(w, http.StatusOK, v)
}
