package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// GET answers a key's version as its ETag; PATCH, rotate and DELETE
// with an If-Match it no longer passes answer 412 and change nothing,
// and with the current one they go through and answer the next.
func TestKeyETagAndIfMatch(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme","name":"etag"}`)
	path := "/admin/keys/" + v.ID
	get := e.adminCall("GET", path, "", nil)
	tag := get.header.Get("ETag")
	if get.status != 200 || tag != `"v1"` {
		t.Fatalf("GET: %d, ETag %q, want \"v1\"", get.status, tag)
	}
	patched := e.adminCall("PATCH", path, `{"name":"first"}`, map[string]string{"If-Match": tag})
	if patched.status != 200 || patched.header.Get("ETag") != `"v2"` {
		t.Fatalf("PATCH with the current ETag: %s, ETag %q", patched, patched.header.Get("ETag"))
	}
	for _, c := range []struct{ method, path, body, ifMatch string }{
		{"PATCH", path, `{"name":"stale"}`, tag},
		{"PATCH", path, `{"name":"weak"}`, `W/"v2"`},
		{"POST", path + "/rotate", `{}`, tag},
		{"DELETE", path, ``, `"v1", "v9"`},
	} {
		got := e.adminCall(c.method, c.path, c.body, map[string]string{"If-Match": c.ifMatch})
		if got.status != 412 || got.code != api.CodePreconditionFailed || !strings.Contains(string(got.body), `\"v2\"`) {
			t.Fatalf("%s %s with If-Match %s: %s, want 412 %s naming the current ETag", c.method, c.path, c.ifMatch, got, api.CodePreconditionFailed)
		}
	}
	if k := e.readKeyView(v.ID); k.Name != "first" || k.Version != 2 || k.RevokedAt != nil || !e.authenticates(v.Key) {
		t.Fatalf("refused writes changed the key: %+v", k)
	}
	if got := e.adminCall("PATCH", path, `{}`, map[string]string{"If-Match": `v2`}); got.status != 400 || got.code != api.CodeInvalidRequest {
		t.Fatalf("an If-Match that is no entity tag: %s", got)
	}
	rot := e.adminCall("POST", path+"/rotate", `{}`, map[string]string{"If-Match": `"v1", "v2"`})
	if rot.status != 200 || rot.header.Get("ETag") != `"v3"` {
		t.Fatalf("rotate with a list naming the current ETag: %s", rot)
	}
	del := e.adminCall("DELETE", path, "", map[string]string{"If-Match": "*"})
	if del.status != 204 || del.header.Get("ETag") != `"v4"` || e.authenticates(secretOf(t, rot)) {
		t.Fatalf("DELETE with If-Match *: %s, ETag %q", del, del.header.Get("ETag"))
	}
	// A revocation is final: a PATCH or rotate of a revoked key is 409
	// key_revoked, whatever If-Match says; DELETE again is 204.
	for _, c := range []struct{ method, path, ifMatch string }{{"PATCH", path, `"v4"`}, {"POST", path + "/rotate", ""}, {"PATCH", path, ""}} {
		got := e.adminCall(c.method, c.path, `{}`, map[string]string{"If-Match": c.ifMatch})
		if got.status != 409 || got.code != api.CodeKeyRevoked {
			t.Fatalf("%s %s of a revoked key: %s, want 409 %s", c.method, c.path, got, api.CodeKeyRevoked)
		}
	}
	if got := e.adminCall("DELETE", path, "", nil); got.status != 204 {
		t.Fatalf("DELETE of a revoked key: %s", got)
	}
	if k := e.readKeyView(v.ID); k.Version != 4 || k.RevokedAt == nil {
		t.Fatalf("after writes to a revoked key: version %d revoked %v", k.Version, k.RevokedAt)
	}
}

// Rotating twice, each with its own grace: each previous secret works
// until its own end — the second rotation does not cut the first grace
// short — and the admin API lists both.
func TestKeyRotatedTwiceKeepsEachGrace(t *testing.T) {
	clk := new(clock.Offset)
	e := newEnvOpts(t, envOptions{clock: clk})
	v := e.issue(`{"tenant":"acme"}`)
	rotateWith := func(grace string) string {
		t.Helper()
		got := e.adminCall("POST", "/admin/keys/"+v.ID+"/rotate", `{"grace":"`+grace+`"}`, nil)
		if got.status != 200 {
			t.Fatalf("rotate with grace %s: %s", grace, got)
		}
		return secretOf(t, got)
	}
	second := rotateWith("10m") // the first secret works 10 minutes more
	clk.Advance(time.Minute)
	third := rotateWith("2m") // the second, 2 minutes more
	if got := e.readKeyView(v.ID); len(got.Previous) != 2 || got.PreviousValidUntil == nil ||
		!got.PreviousValidUntil.Equal(got.Previous[0].ValidUntil) || !strings.HasPrefix(v.Key, got.Previous[0].Prefix) {
		t.Fatalf("the key lists its previous secrets: %+v", got.Previous)
	}
	for _, c := range []struct {
		after                time.Duration
		first, second, third bool
	}{
		{0, true, true, true},
		{3 * time.Minute, true, false, true}, // the second's grace ended, not the first's
		{7 * time.Minute, false, false, true},
	} {
		clk.Advance(c.after)
		if got := [3]bool{e.authenticates(v.Key), e.authenticates(second), e.authenticates(third)}; got != [3]bool{c.first, c.second, c.third} {
			t.Fatalf("%v later, the three secrets work: %v, want %v", c.after, got, [3]bool{c.first, c.second, c.third})
		}
	}
	if got := e.readKeyView(v.ID); len(got.Previous) != 0 || got.PreviousValidUntil != nil {
		t.Fatalf("previous secrets past their grace are still listed: %+v", got.Previous)
	}
	// Previous secrets within their grace are bounded: past the bound a
	// rotation with a grace is refused (none cut short), one without
	// grace still goes through.
	for range ledger.MaxPrevious {
		rotateWith("1h")
	}
	if got := e.adminCall("POST", "/admin/keys/"+v.ID+"/rotate", `{"grace":"1h"}`, nil); got.status != 400 || got.code != api.CodeInvalidRequest {
		t.Fatalf("a rotation with a grace past %d previous secrets: %s", ledger.MaxPrevious, got)
	}
	rotateWith("0s")
	if got := e.readKeyView(v.ID); len(got.Previous) != ledger.MaxPrevious {
		t.Fatalf("%d previous secrets listed, want %d", len(got.Previous), ledger.MaxPrevious)
	}
}

// Admin bodies are strict: a member given twice is a 400 naming it, in
// any case encoding/json would take it in; a models list is kept without
// its repeats, and a list of more distinct models than a key may have is
// a 400.
func TestKeyBodiesAreStrict(t *testing.T) {
	e := newEnv(t, mock.Config{})
	v := e.issue(`{"tenant":"acme","name":"strict","metadata":{"team":"a","Team":"b"}}`)
	if got := e.readKeyView(v.ID); len(got.Metadata) != 2 {
		t.Fatalf("metadata keys differing in case are two keys: %v", got.Metadata)
	}
	for _, c := range []struct{ method, path, body, param string }{
		{"POST", "/admin/keys", `{"tenant":"acme","tenant":"globex"}`, "tenant"},
		{"POST", "/admin/keys", `{"tenant":"acme","TENANT":"globex"}`, "TENANT"},
		{"POST", "/admin/keys", `{"tenant":"acme","budget":{"requests_per_minute":1,"requests_per_minute":1000}}`, "budget.requests_per_minute"},
		{"PATCH", "/admin/keys/" + v.ID, `{"name":"a","na\u006de":"b"}`, "name"},
		{"PATCH", "/admin/keys/" + v.ID, `{"metadata":{"team":"a","team":"b"}}`, "metadata.team"},
		{"POST", "/admin/keys/" + v.ID + "/rotate", `{"grace":"1h","grace":"0s"}`, "grace"},
	} {
		got := e.adminCall(c.method, c.path, c.body, nil)
		var er struct{ Error struct{ Param, Code string } }
		_ = json.Unmarshal(got.body, &er)
		if got.status != 400 || er.Error.Param != c.param || er.Error.Code != api.CodeInvalidRequest {
			t.Errorf("%s %s %s: %s, want 400 naming %s", c.method, c.path, c.body, got, c.param)
		}
	}
	if got := e.readKeyView(v.ID); got.Name != "strict" || got.Version != 1 {
		t.Fatalf("a refused body changed the key: %+v", got)
	}
	many := `"chat"` + strings.Repeat(`,"chat","embed"`, 5000)
	k := e.issue(`{"tenant":"acme","models":[` + many + `]}`)
	if got := e.readKeyView(k.ID); strings.Join(got.Models, ",") != "chat,embed" {
		t.Fatalf("10 001 models with repeats are stored as %d: %.80v", len(got.Models), got.Models)
	}
	names := make([]string, admin.MaxKeyModels+1)
	for i := range names {
		names[i] = fmt.Sprintf(`"m%d"`, i)
	}
	got := e.adminCall("PATCH", "/admin/keys/"+k.ID, `{"models":[`+strings.Join(names, ",")+`]}`, nil)
	if got.status != 400 || got.code != api.CodeInvalidRequest || !strings.Contains(string(got.body), fmt.Sprintf("at most %d models", admin.MaxKeyModels)) {
		t.Fatalf("%d distinct models: %s", len(names), got)
	}
}

// A route refused by a virtual key's data boundary, narrower than its
// tenant's, is refused in the key's name; the tenant's own boundary in
// the tenant's.
func TestKeyBoundaryRefusalNamesTheKey(t *testing.T) {
	e := newEnv(t, mock.Config{})
	narrow := e.issue(`{"tenant":"acme","max_data_boundary":"private"}`)
	same := e.issue(`{"tenant":"globex","max_data_boundary":"private"}`)
	for _, c := range []struct{ name, key, want string }{
		{"a key narrower than its tenant", narrow.Key, "claude: data boundary external exceeds virtual key " + narrow.ID + "'s private"},
		{"a key as narrow as its tenant", same.Key, "claude: data boundary external exceeds the tenant's private"},
		{"a tenant's file key", keyGlobex, "claude: data boundary external exceeds the tenant's private"},
	} {
		res, body := e.postKey(c.key, "/v1/chat/completions", chatBody("claude", false), nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.name, res.StatusCode, body, c.want)
		}
	}
	if n := e.anthropic.Requests(); n != 0 {
		t.Fatalf("the provider saw %d requests", n)
	}
}
