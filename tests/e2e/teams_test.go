package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	oaopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// Two replicas sharing PostgreSQL and Redis: a team created on one is
// known to the other at once — a key issued for it there works, and the
// team's rate is one for both; deleted on one, its key is refused on the
// other within a second. A replica started later knows the teams.
func TestTeamAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	a, b := f.gws[0], f.gws[1]
	for _, body := range []string{`{"id":"team-e2e","models":["chat"],"budget":{"requests_per_minute":2}}`, `{"id":"team-kept"}`} {
		if st, res := adminCall(t, a, "POST", "/admin/tenants", body); st != 201 {
			t.Fatalf("create on a: %d %s", st, res)
		}
	}
	_, secret := issueOn(t, b, `{"tenant":"team-e2e","name":"app"}`)
	_, kept := issueOn(t, b, `{"tenant":"team-kept"}`)
	hdr, err := chatAs(a, secret, "team key issued on b, used on a")
	if err != nil {
		t.Fatalf("the team's key on the other replica: %v", err)
	}
	req, _ := http.NewRequest("GET", b.url+"/v1/receipts/"+hdr.Get("X-Oncegate-Request-Id"), nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rc struct{ Tenant string }
	_ = json.NewDecoder(res.Body).Decode(&rc)
	res.Body.Close()
	if rc.Tenant != "team-e2e" {
		t.Fatalf("receipt tenant %q, want team-e2e", rc.Tenant)
	}
	if _, err := chatAs(b, secret, "second of the minute"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*gateway{a, b} {
		_, err := chatAs(g, secret, "third of the minute", oaopt.WithMaxRetries(0))
		if st, code := statusOf(err); st != 429 || code != "tenant_rate_limited" {
			t.Fatalf("the third request of a 2-per-minute team: %d %s", st, code)
		}
	}
	if n := f.primary.Stats().Requests; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2", n)
	}
	if st, body := adminCall(t, a, "DELETE", "/admin/tenants/team-e2e", ""); st != 204 {
		t.Fatalf("delete on a: %d %s", st, body)
	}
	within(t, time.Second, "the deleted team's key refused on the other replica", func() bool {
		_, err := chatAs(b, secret, "after the deletion", oaopt.WithMaxRetries(0))
		st, _ := statusOf(err)
		return st == 401
	})
	if n := f.primary.Stats().Requests; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2", n)
	}
	// A replica started now reads the teams from the store.
	c := f.start()
	if _, err := chatAs(c, kept, "on a new replica"); err != nil {
		t.Fatalf("a live team's key on a replica started later: %v", err)
	}
	_, err = chatAs(c, secret, "deleted, on a new replica", oaopt.WithMaxRetries(0))
	if st, _ := statusOf(err); st != 401 {
		t.Fatalf("a deleted team's key on a replica started later: %d", st)
	}
	if st, body := adminCall(t, c, "GET", "/admin/tenants/team-e2e", ""); st != 200 || !json.Valid(body) {
		t.Fatalf("the deleted team on a new replica: %d %s", st, body)
	}
}
