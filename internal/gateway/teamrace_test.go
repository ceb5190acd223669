package gateway

import (
	"fmt"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/mock"
)

// readTeam reads team id through the admin API.
func (e *env) readTeam(id string) admin.TenantView {
	e.t.Helper()
	var v admin.TenantView
	if st, b := e.adminDo(keyAdmin, "GET", "/admin/tenants/"+id, "", &v); st != 200 {
		e.t.Fatalf("read %s: %d %s", id, st, b)
	}
	return v
}

// raceTeams creates rounds teams (prefix-0, prefix-1 …), each with a key, and for each sends
// a's and b's requests at once — every round's together — then checks
// each team's two answers.
func raceTeams(t *testing.T, e *env, prefix string, rounds int, a, b func(id string) adminReq, check func(t *testing.T, id string, k admin.KeyView, ra, rb adminAnswer)) {
	t.Helper()
	ids := make([]string, rounds)
	keys := make([]admin.KeyView, rounds)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		e.createTeam(`{"id":"` + ids[i] + `","name":"raced","metadata":{"seed":"1"}}`)
		keys[i] = e.issue(`{"tenant":"` + ids[i] + `"}`)
	}
	got := make([][2]adminAnswer, rounds)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		for j, f := range []func(string) adminReq{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := f(id)
				<-start
				got[i][j] = e.adminCall(r.method, r.path, r.body, nil)
			}()
		}
	}
	close(start)
	wg.Wait()
	for i, id := range ids {
		check(t, id, keys[i], got[i][0], got[i][1])
	}
}

func patchTeam(body string) func(string) adminReq {
	return func(id string) adminReq { return adminReq{"PATCH", "/admin/tenants/" + id, body} }
}

func deleteTeam(id string) adminReq { return adminReq{"DELETE", "/admin/tenants/" + id, ""} }

// Admin writes racing on one team, many times over: a deletion is final
// (its keys refused, the team never brought back), and no 200 loses its
// change.
func TestTeamWritesRacing(t *testing.T) {
	e := newEnv(t, mock.Config{})
	const rounds = 24
	t.Run("a deletion racing a PATCH stays", func(t *testing.T) {
		raceTeams(t, e, "deleted", rounds, deleteTeam, patchTeam(`{"metadata":{"raced":"yes"}}`), func(t *testing.T, id string, k admin.KeyView, del, pat adminAnswer) {
			if del.status != 204 {
				t.Errorf("DELETE: %s", del)
			}
			if pat.status != 200 && (pat.status != 409 || pat.code != api.CodeTenantDeleted) {
				t.Errorf("PATCH racing a deletion: %s, want 200 or 409 %s", pat, api.CodeTenantDeleted)
			}
			got := e.readTeam(id)
			if got.DeletedAt == nil || e.authenticates(k.Key) {
				t.Errorf("team %s answered 204 to DELETE, yet it is not deleted (deleted_at %v; PATCH %d) or its key works", id, got.DeletedAt, pat.status)
			}
			if pat.status == 200 && got.Metadata["raced"] != "yes" {
				t.Errorf("PATCH answered 200, its change is lost: %v", got.Metadata)
			}
		})
	})
	t.Run("PATCHes of different fields each keep their change", func(t *testing.T) {
		raceTeams(t, e, "patched", rounds, patchTeam(`{"name":"renamed"}`), patchTeam(`{"metadata":{"team":"b"}}`), func(t *testing.T, id string, _ admin.KeyView, a, b adminAnswer) {
			got := e.readTeam(id)
			for _, c := range []struct {
				call    adminAnswer
				kept    bool
				what    string
				applied string
			}{{a, got.Name == "renamed", "name", got.Name}, {b, got.Metadata["team"] == "b", "metadata", fmt.Sprint(got.Metadata)}} {
				switch {
				case c.call.status == 200 && !c.kept:
					t.Errorf("PATCH of %s answered 200, its change is lost: %s", c.what, c.applied)
				case c.call.status == 409 && c.call.code == api.CodeTenantConflict && c.kept:
					t.Errorf("PATCH of %s answered 409, yet changed the team", c.what)
				case c.call.status != 200 && c.call.status != 409:
					t.Errorf("PATCH of %s: %s", c.what, c.call)
				}
			}
		})
	})
}
