package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
)

// createTeam creates a team through the admin API.
func (e *env) createTeam(body string) admin.TenantView {
	e.t.Helper()
	var v admin.TenantView
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/tenants", body, &v); st != 201 {
		e.t.Fatalf("create team %s: %d %s", body, st, b)
	}
	return v
}

// refusedWithin waits until secret no longer authenticates, failing the
// test if it still does at the deadline.
func (e *env) refusedWithin(secret string, d time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for e.authenticates(secret) {
		if time.Now().After(deadline) {
			e.t.Fatalf("a key of a deleted team still authenticates after %v", d)
		}
	}
}

// A team created through the admin API is a tenant like the file's: a
// key issued for it works with the official SDK, its receipts name it,
// its models bound its keys, and deleting it refuses its keys while its
// receipts stay readable by the admin key.
func TestTeamCreateIssueUseDelete(t *testing.T) {
	e := newEnv(t, mock.Config{})
	tm := e.createTeam(`{"id":"team-a","name":"Team A","models":["chat","chat-stop"],"budget":{"requests_per_minute":100},"metadata":{"cost_center":"42"}}`)
	if tm.Source != admin.SourceStore || tm.Version != 1 || tm.Name != "Team A" || tm.Metadata["cost_center"] != "42" || tm.CreatedAt == nil ||
		tm.MaxDataBoundary != "external" || len(tm.Models) != 2 {
		t.Fatalf("created: %+v", tm)
	}
	v := e.issue(`{"tenant":"team-a","name":"app"}`)
	var hdr http.Header
	cl := e.openai(&hdr, oopt2.WithAPIKey(v.Key))
	res, err := cl.Chat.Completions.New(context.Background(), oaParams("chat", "hello team"))
	if err != nil || len(res.Choices) != 1 {
		t.Fatalf("a request with the team's key: %v", err)
	}
	id := hdr.Get("X-Oncegate-Request-Id")
	if rc := e.receiptAs(v.Key, id); rc.Tenant != "team-a" || rc.KeyID != v.ID {
		t.Fatalf("receipt tenant %q key %q, want team-a %s", rc.Tenant, rc.KeyID, v.ID)
	}
	// A model the team's list leaves out: 403, nothing sent.
	before := e.primary.Stats().Requests
	_, err = cl.Chat.Completions.New(context.Background(), oaParams("chat-restart", "outside"))
	if st, code, _ := apiErrorOf(t, err); st != 403 || code != api.CodeModelNotAllowed {
		t.Fatalf("a model outside the team: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests - before; n != 0 {
		t.Fatalf("a refused model reached the primary %d times", n)
	}
	// A key may not widen its team's models.
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/keys", `{"tenant":"team-a","models":["claude"]}`, nil); st != 400 || !strings.Contains(string(b), `\"claude\"`) {
		t.Fatalf("a key wider than its team: %d %s", st, b)
	}
	// The list: the file's tenants read-only, the team from the store.
	var list struct{ Data []admin.TenantView }
	if st, b := e.adminDo(keyAdmin, "GET", "/admin/tenants", "", &list); st != 200 {
		t.Fatalf("list: %d %s", st, b)
	}
	sources := map[string]string{}
	for _, x := range list.Data {
		sources[x.ID] = x.Source
	}
	if sources["acme"] != admin.SourceFile || sources["team-a"] != admin.SourceStore {
		t.Fatalf("list sources: %v", sources)
	}

	if st, b := e.adminDo(keyAdmin, "DELETE", "/admin/tenants/team-a", "", nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	e.refusedWithin(v.Key, time.Second)
	_, err = cl.Chat.Completions.New(context.Background(), oaParams("chat", "after delete"))
	if st, code, _ := apiErrorOf(t, err); st != 401 || code != api.CodeUnauthorized {
		t.Fatalf("a deleted team's key: %d %s", st, code)
	}
	if k := e.readKeyView(v.ID); k.RevokedAt == nil {
		t.Fatalf("a deleted team's key is not revoked: %+v", k)
	}
	if rc := e.receiptAs(keyAdmin, id); rc.Tenant != "team-a" {
		t.Fatalf("the admin key reads the deleted team's receipt: %+v", rc)
	}
	// Final: a PATCH is 409 tenant_deleted, its id is not given out again.
	if a := e.adminCall("PATCH", "/admin/tenants/team-a", `{"name":"back"}`, nil); a.status != 409 || a.code != api.CodeTenantDeleted {
		t.Fatalf("PATCH of a deleted team: %s", a)
	}
	if a := e.adminCall("POST", "/admin/tenants", `{"id":"team-a"}`, nil); a.status != 409 || a.code != api.CodeTenantExists {
		t.Fatalf("POST of a deleted team's id: %s", a)
	}
	if st, b := e.adminDo(keyAdmin, "POST", "/admin/keys", `{"tenant":"team-a"}`, nil); st != 400 {
		t.Fatalf("a key for a deleted team: %d %s", st, b)
	}
}

// The admin API reads the file's tenants and never changes them; its
// bodies are strict and name what was wrong.
func TestTeamAdminRefusals(t *testing.T) {
	e := newEnv(t, mock.Config{})
	for _, c := range []struct {
		method, path, body string
		status             int
		code, names        string
	}{
		{"PATCH", "/admin/tenants/acme", `{"name":"x"}`, 409, api.CodeTenantInFile, "acme"},
		{"DELETE", "/admin/tenants/acme", ``, 409, api.CodeTenantInFile, "acme"},
		{"POST", "/admin/tenants", `{"id":"acme"}`, 409, api.CodeTenantInFile, "acme"},
		{"POST", "/admin/tenants", `{"id":"t1","id":"t2"}`, 400, api.CodeInvalidRequest, "id"},
		{"POST", "/admin/tenants", `{"id":"t1","colour":"red"}`, 400, api.CodeInvalidRequest, "colour"},
		{"POST", "/admin/tenants", `{"id":"t1","budget":{"cost_per_day":1}}`, 400, api.CodeInvalidRequest, "cost_per_day"},
		{"POST", "/admin/tenants", `{"id":"t1","models":["chat","gpt-nope"]}`, 400, api.CodeInvalidRequest, "gpt-nope"},
		{"POST", "/admin/tenants", `{"id":"t1","budget":{"cost_usd_per_day":-1}}`, 400, api.CodeInvalidRequest, "negative"},
		{"POST", "/admin/tenants", `{"id":"t1","max_data_boundary":"moon"}`, 400, api.CodeInvalidRequest, "moon"},
		{"POST", "/admin/tenants", `{"id":"t1","budget":{"cost_usd_total":2e9}}`, 400, api.CodeInvalidRequest, "cost_usd_total"},
		{"POST", "/admin/tenants", `{"name":"no id"}`, 400, api.CodeInvalidRequest, "id"},
		{"POST", "/admin/tenants", `{"id":"a b"}`, 400, api.CodeInvalidRequest, "id"},
		{"GET", "/admin/tenants/nope", ``, 404, api.CodeNotFound, "nope"},
		{"PATCH", "/admin/tenants/nope", `{}`, 404, api.CodeNotFound, "nope"},
	} {
		a := e.adminCall(c.method, c.path, c.body, nil)
		if a.status != c.status || a.code != c.code || !strings.Contains(string(a.body), c.names) {
			t.Errorf("%s %s %s: %s, want %d %s naming %q", c.method, c.path, c.body, a, c.status, c.code, c.names)
		}
	}
	if st, _ := e.adminDo(keyAcme, "GET", "/admin/tenants", "", nil); st != 403 {
		t.Fatalf("a tenant's key on /admin/tenants: %d", st)
	}
	var fileView admin.TenantView
	if st, b := e.adminDo(keyAdmin, "GET", "/admin/tenants/umbrella", "", &fileView); st != 200 || fileView.Source != admin.SourceFile ||
		fileView.Budget.CostUSDPerDay != 0.001 {
		t.Fatalf("a file tenant read: %d %s", st, b)
	}
	// Lists are deduplicated; more than 256 distinct models are refused.
	tm := e.createTeam(`{"id":"dedup","models":["chat","chat","chat-stop","chat"]}`)
	if len(tm.Models) != 2 {
		t.Fatalf("models deduplicated: %v", tm.Models)
	}
	many := make([]string, 257)
	for i := range many {
		many[i] = "m" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	body, _ := json.Marshal(map[string]any{"id": "many", "models": many})
	if a := e.adminCall("POST", "/admin/tenants", string(body), nil); a.status != 400 || !strings.Contains(string(a.body), "256") {
		t.Fatalf("257 models: %s", a)
	}
	// ETag and If-Match, as for keys.
	a := e.adminCall("GET", "/admin/tenants/dedup", "", nil)
	if a.status != 200 || a.header.Get("ETag") != `"v1"` {
		t.Fatalf("GET: %s, ETag %q", a, a.header.Get("ETag"))
	}
	if a := e.adminCall("PATCH", "/admin/tenants/dedup", `{"name":"x"}`, map[string]string{"If-Match": `"v7"`}); a.status != 412 {
		t.Fatalf("PATCH with a stale If-Match: %s", a)
	}
	if a := e.adminCall("PATCH", "/admin/tenants/dedup", `{"name":"x"}`, map[string]string{"If-Match": `"v1"`}); a.status != 200 || a.header.Get("ETag") != `"v2"` {
		t.Fatalf("PATCH with the current If-Match: %s", a)
	}
}

// A team's day's cost is reserved before dispatch at worst case, as a
// file tenant's: past it the request is 429 and the provider sees
// nothing; a restart keeps the team and its day.
func TestTeamBudgetBeforeDispatchAndAcrossRestart(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	e.createTeam(`{"id":"team-b","budget":{"cost_usd_per_day":0.0005}}`)
	v := e.issue(`{"tenant":"team-b"}`)
	cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
	p := oaParams("chat", "cost")
	p.MaxTokens = openai.Int(100)
	var err error
	for range 50 {
		if _, err = cl.Chat.Completions.New(ctx, p); err != nil {
			break
		}
	}
	st, code, h := apiErrorOf(t, err)
	if st != 429 || code != api.CodeTenantBudget || h.Get("Retry-After") == "" || h.Get("x-should-retry") != "false" {
		t.Fatalf("over the team's day: %d %s %v", st, code, h)
	}
	sent := e.primary.Stats().Requests
	_, err = cl.Chat.Completions.New(ctx, p)
	if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeTenantBudget {
		t.Fatalf("again: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests - sent; n != 0 {
		t.Fatalf("a refused request reached the primary %d times", n)
	}
	var spent admin.TenantView
	e.adminDo(keyAdmin, "GET", "/admin/tenants/team-b", "", &spent)
	if spent.Spend == nil || spent.Spend.TodayUSD <= 0 || spent.Spend.TodayUSD > 0.0005 {
		t.Fatalf("the team's spend today: %+v", spent.Spend)
	}

	e.restart()
	var kept admin.TenantView
	if st, b := e.adminDo(keyAdmin, "GET", "/admin/tenants/team-b", "", &kept); st != 200 || kept.Budget.CostUSDPerDay != 0.0005 {
		t.Fatalf("the team after a restart: %d %s", st, b)
	}
	cl = e.openai(nil, oopt2.WithAPIKey(v.Key))
	_, err = cl.Chat.Completions.New(ctx, p)
	if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeTenantBudget {
		t.Fatalf("after a restart: %d %s (the team's day was forgotten)", st, code)
	}
	if n := e.primary.Stats().Requests - sent; n != 0 {
		t.Fatalf("after a restart the primary saw %d more", n)
	}
}

// A team's tokens per minute hold over all its keys, reserved before
// dispatch as a key's are: two keys of a 100-token team, each request
// may use ~60, so the minute admits one or two and then refuses, whichever
// key asks, with nothing sent.
func TestTeamTokensPerMinuteOverItsKeys(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	e.createTeam(`{"id":"team-t","budget":{"tokens_per_minute":100}}`)
	keys := []admin.KeyView{e.issue(`{"tenant":"team-t"}`), e.issue(`{"tenant":"team-t"}`)}
	p := oaParams("chat", "tokens")
	p.MaxTokens = openai.Int(50)
	if _, err := clientNew(e.openai(nil, oopt2.WithAPIKey(keys[0].Key)), ctx, p); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := range 3 {
		cl := e.openai(nil, oopt2.WithAPIKey(keys[1-i%2].Key))
		if _, err = cl.Chat.Completions.New(ctx, p, oopt2.WithMaxRetries(0)); err != nil {
			break
		}
	}
	st, code, h := apiErrorOf(t, err)
	if st != 429 || code != api.CodeTenantRateLimited || h.Get("Retry-After") == "" {
		t.Fatalf("over the team's tokens: %d %s", st, code)
	}
	sent := e.primary.Stats().Requests
	if sent > 2 {
		t.Fatalf("primary saw %d requests of a 100-token minute at ~60 tokens each", sent)
	}
	_, err = clientNew(e.openai(nil, oopt2.WithAPIKey(keys[0].Key)), ctx, p, oopt2.WithMaxRetries(0))
	if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeTenantRateLimited {
		t.Fatalf("the other key, same minute: %d %s", st, code)
	}
	if n := e.primary.Stats().Requests; n != sent {
		t.Fatalf("a refused request reached the primary (%d → %d)", sent, n)
	}
}

// A team's month and lifetime budgets are held as a file tenant's: each
// refuses before dispatch once spent, and the lifetime one sends no
// Retry-After (it never resets).
func TestTeamMonthAndLifetimeBudgets(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	for _, c := range []struct{ team, budget string }{{"team-m", `{"cost_usd_per_month":0.0005}`}, {"team-l", `{"cost_usd_total":0.0005}`}} {
		e.createTeam(`{"id":"` + c.team + `","budget":` + c.budget + `}`)
		v := e.issue(`{"tenant":"` + c.team + `"}`)
		cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
		p := oaParams("chat", "cost of "+c.team)
		p.MaxTokens = openai.Int(100)
		var err error
		for range 50 {
			if _, err = cl.Chat.Completions.New(ctx, p); err != nil {
				break
			}
		}
		st, code, h := apiErrorOf(t, err)
		if st != 429 || code != api.CodeTenantBudget || h.Get("x-should-retry") != "false" || (c.team == "team-m") != (h.Get("Retry-After") != "") {
			t.Fatalf("%s over its budget: %d %s %v", c.team, st, code, h)
		}
		sent := e.primary.Stats().Requests
		if _, err = cl.Chat.Completions.New(ctx, p); err == nil {
			t.Fatalf("%s: a request after the budget was spent was answered", c.team)
		}
		if n := e.primary.Stats().Requests - sent; n != 0 {
			t.Fatalf("%s: a refused request reached the primary %d times", c.team, n)
		}
	}
}
