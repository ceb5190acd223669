package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/memory"
	"github.com/oncegate/oncegate/internal/metrics"
	"github.com/oncegate/oncegate/internal/policy"
)

const testYAML = `
tenants: [{id: acme, api_key_env: K}]
providers: [{id: p, type: openai, base_url: "http://127.0.0.1:1/v1"}]
routes:
  - {id: r, provider: p, model: m, behavior_class: c, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}, capabilities: {input: [text]}}
models:
  - {name: chat, routes: [r]}
  - {name: other, routes: [r]}
`

// fakeGateway is the admin API's view of a gateway: the admin key is
// "admin"; it records the changes it is told of.
type fakeGateway struct {
	pol     *policy.Policy
	mu      sync.Mutex
	changed []string
}

func (f *fakeGateway) Policy() *policy.Policy { return f.pol }
func (f *fakeGateway) AdminEnabled() bool     { return true }
func (f *fakeGateway) IsAdmin(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer admin"
}
func (f *fakeGateway) IsTenant(r *http.Request) bool { return false }
func (f *fakeGateway) KeyChanged(_ context.Context, id string) {
	f.mu.Lock()
	f.changed = append(f.changed, "key:"+id)
	f.mu.Unlock()
}
func (f *fakeGateway) TenantChanged(_ context.Context, id string) {
	f.mu.Lock()
	f.changed = append(f.changed, "tenant:"+id)
	f.mu.Unlock()
}

// racingStore makes the first UpdateTenant of a team meet another write
// made just before it: the name set to "other writer".
type racingStore struct {
	ledger.Store
	once sync.Once
}

func (s *racingStore) UpdateTenant(ctx context.Context, t *ledger.Tenant) error {
	s.once.Do(func() {
		other, _ := s.Store.Tenant(ctx, t.ID)
		other.Name = "other writer"
		_ = s.Store.UpdateTenant(ctx, other)
	})
	return s.Store.UpdateTenant(ctx, t)
}

type harness struct {
	t   *testing.T
	gw  *fakeGateway
	mux *http.ServeMux
	log *bytes.Buffer
}

func newHarness(t *testing.T, store ledger.Store) *harness {
	pol, err := policy.Parse("admin.yaml", []byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, gw: &fakeGateway{pol: pol}, mux: http.NewServeMux(), log: new(bytes.Buffer)}
	a := New(Deps{Gateway: h.gw, Store: store, Clock: clock.NewFake(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)),
		Log: slog.New(slog.NewJSONHandler(h.log, nil)), Metrics: metrics.New(nil), Secret: []byte("s")})
	a.Mount(h.mux)
	return h
}

func (h *harness) do(method, path, body string, header ...string) (int, string, http.Header) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer admin")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.mux.ServeHTTP(w, r)
	var er struct{ Error struct{ Code string } }
	_ = json.Unmarshal(w.Body.Bytes(), &er)
	return w.Code, er.Error.Code + " " + w.Body.String(), w.Header()
}

// A team's life through the admin API: created (the gateway told), read
// with its ETag, changed, deleted with its keys — each key revoked and
// the gateway told of it — and every action audit-logged by the admin.
func TestTenantLifecycle(t *testing.T) {
	store := memory.New(0)
	h := newHarness(t, store)
	if st, body, hdr := h.do("POST", "/admin/tenants", `{"id":"team-a","name":"A","models":["chat","chat"],"budget":{"cost_usd_per_day":3}}`); st != 201 ||
		hdr.Get("ETag") != `"v1"` || !strings.Contains(body, `"models":["chat"]`) || !strings.Contains(body, `"source":"store"`) {
		t.Fatalf("create: %d %s %v", st, body, hdr)
	}
	if st, body, _ := h.do("POST", "/admin/keys", `{"tenant":"team-a","models":["other"]}`); st != 400 || !strings.Contains(body, `\"other\"`) {
		t.Fatalf("a key wider than its team: %d %s", st, body)
	}
	var ids []string
	for range 2 {
		st, body, _ := h.do("POST", "/admin/keys", `{"tenant":"team-a","models":["chat"]}`)
		var v KeyView
		if err := json.Unmarshal([]byte(strings.TrimPrefix(body, " ")), &v); st != 201 || err != nil {
			t.Fatalf("issue for the team: %d %s", st, body)
		}
		ids = append(ids, v.ID)
	}
	if st, body, hdr := h.do("PATCH", "/admin/tenants/team-a", `{"budget":{"cost_usd_per_day":5}}`, "If-Match", `"v1"`); st != 200 || hdr.Get("ETag") != `"v2"` ||
		!strings.Contains(body, `"cost_usd_per_day":5`) {
		t.Fatalf("patch: %d %s", st, body)
	}
	if st, body, _ := h.do("DELETE", "/admin/tenants/team-a", ``, "If-Match", `"v1"`); st != 412 {
		t.Fatalf("delete at a replaced version: %d %s", st, body)
	}
	if st, body, _ := h.do("DELETE", "/admin/tenants/team-a", ``); st != 204 {
		t.Fatalf("delete: %d %s", st, body)
	}
	for _, id := range ids {
		if k, err := store.Key(context.Background(), id); err != nil || !k.Revoked() {
			t.Fatalf("key %s of the deleted team: %+v %v", id, k, err)
		}
	}
	want := []string{"tenant:team-a", "key:" + ids[0], "key:" + ids[1], "tenant:team-a", "tenant:team-a", "key:" + ids[0], "key:" + ids[1]}
	if got := strings.Join(h.gw.changed, " "); got != strings.Join(want, " ") {
		t.Fatalf("the gateway was told %s, want %s", got, strings.Join(want, " "))
	}
	for _, action := range []string{"create_tenant", "update_tenant", "delete_tenant", "revoke"} {
		if !strings.Contains(h.log.String(), `"action":"`+action+`","by":"admin"`) {
			t.Errorf("no audit line for %s in %s", action, h.log)
		}
	}
	if st, body, _ := h.do("DELETE", "/admin/tenants/team-a", ``); st != 204 {
		t.Fatalf("a second delete: %d %s", st, body)
	}
	if st, body, _ := h.do("PATCH", "/admin/tenants/team-a", `{"name":"x"}`); st != 409 || !strings.HasPrefix(body, api.CodeTenantDeleted) {
		t.Fatalf("patch of a deleted team: %d %s", st, body)
	}
}

// A PATCH whose write meets another change is applied again to the team
// as that change left it: both changes stay, and the answer says so.
func TestTenantPatchMergesARacingWrite(t *testing.T) {
	store := &racingStore{Store: memory.New(0)}
	h := newHarness(t, store)
	if st, body, _ := h.do("POST", "/admin/tenants", `{"id":"team-m","name":"first"}`); st != 201 {
		t.Fatalf("create: %d %s", st, body)
	}
	st, body, hdr := h.do("PATCH", "/admin/tenants/team-m", `{"metadata":{"k":"v"}}`)
	if st != 200 || hdr.Get("ETag") != `"v3"` || !strings.Contains(body, `"name":"other writer"`) || !strings.Contains(body, `"k":"v"`) {
		t.Fatalf("a PATCH that raced a write: %d %s %v", st, body, hdr)
	}
	got, _ := store.Tenant(context.Background(), "team-m")
	if got.Name != "other writer" || got.Spec.Metadata["k"] != "v" || got.Version != 3 {
		t.Fatalf("stored: %+v", got)
	}
	// With If-Match on the version read first, the raced write is a 412.
	store.once = sync.Once{}
	if st, body, _ := h.do("PATCH", "/admin/tenants/team-m", `{"name":"mine"}`, "If-Match", `"v3"`); st != 412 {
		t.Fatalf("an If-Match PATCH that raced a write: %d %s", st, body)
	}
}

// The file's tenants are read-only here, and listed beside the teams.
func TestTenantsOfTheFileAreReadOnly(t *testing.T) {
	h := newHarness(t, memory.New(0))
	for _, c := range [][3]string{{"PATCH", "/admin/tenants/acme", `{"name":"x"}`}, {"DELETE", "/admin/tenants/acme", ``}, {"POST", "/admin/tenants", `{"id":"acme"}`}} {
		if st, body, _ := h.do(c[0], c[1], c[2]); st != 409 || !strings.HasPrefix(body, api.CodeTenantInFile) {
			t.Errorf("%s %s: %d %s", c[0], c[1], st, body)
		}
	}
	h.do("POST", "/admin/tenants", `{"id":"team-z"}`)
	st, body, _ := h.do("GET", "/admin/tenants", ``)
	if st != 200 || !strings.Contains(body, `"id":"acme","object":"tenant","source":"file"`) || !strings.Contains(body, `"id":"team-z","object":"tenant","source":"store"`) {
		t.Fatalf("list: %d %s", st, body)
	}
	if len(h.gw.changed) != 1 {
		t.Fatalf("refused writes told the gateway of changes: %v", h.gw.changed)
	}
}
