package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/mock"
)

// authOn is the status GET /v1/models answers secret on a replica: 200
// for a usable key, 401 otherwise (nothing goes upstream).
func authOn(t *testing.T, g *gateway, secret string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// adminAnswer is one admin call's status and body.
type adminAnswer struct {
	status int
	body   []byte
}

// code is the error code of an admin answer.
func (a adminAnswer) code() string {
	var er struct{ Error struct{ Code string } }
	_ = json.Unmarshal(a.body, &er)
	return er.Error.Code
}

// raceOn sends, for each key in turn, a's request to replica ga and
// b's to replica gb at once, and returns the answers.
func raceOn(t *testing.T, ids []string, ga, gb *gateway, a, b func(id string) (method, path, body string)) [][2]adminAnswer {
	got := make([][2]adminAnswer, len(ids))
	for i, id := range ids {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, side := range []struct {
			g *gateway
			f func(string) (string, string, string)
		}{{ga, a}, {gb, b}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				method, path, body := side.f(id)
				<-start
				st, b := adminCallSafe(side.g, method, path, body)
				got[i][j] = adminAnswer{st, b}
			}()
		}
		close(start)
		wg.Wait()
	}
	return got
}

// adminCallSafe is adminCall for any goroutine: a transport error is
// status -1.
func adminCallSafe(g *gateway, method, path, body string) (int, []byte) {
	req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// Two replicas sharing PostgreSQL and Redis, admin calls on one key
// racing across them, many times over: a DELETE answered 204 refuses the
// key on both replicas within a second, and the store keeps it revoked
// whatever PATCH raced it (both had answered); a PATCH answered 200 kept its change; a rotation answered
// 200 gave a secret that works on both replicas, and the old one (no
// grace) stops on both.
func TestKeyWritesRacingAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	a, b := f.gws[0], f.gws[1]
	const rounds = 24
	issue := func() (ids, secrets []string) {
		for range rounds {
			id, secret := issueOn(t, a, `{"tenant":"e2e","name":"raced"}`)
			ids, secrets = append(ids, id), append(secrets, secret)
		}
		return ids, secrets
	}
	t.Run("DELETE on one replica, PATCH on the other", func(t *testing.T) {
		ids, secrets := issue()
		got := raceOn(t, ids, a, b,
			func(id string) (string, string, string) { return "DELETE", "/admin/keys/" + id, "" },
			func(id string) (string, string, string) {
				return "PATCH", "/admin/keys/" + id, `{"metadata":{"raced":"yes"}}`
			})
		for i, id := range ids {
			del, pat := got[i][0], got[i][1]
			if del.status != 204 || (pat.status != 200 && (pat.status != 409 || pat.code() != "key_revoked")) {
				t.Fatalf("%s: DELETE %d %s, PATCH %d %s", id, del.status, del.body, pat.status, pat.body)
			}
			for _, g := range []*gateway{a, b} {
				within(t, time.Second, "the revoked key refused on "+g.url, func() bool { return authOn(t, g, secrets[i]) == 401 })
			}
			var k struct {
				RevokedAt *time.Time        `json:"revoked_at"`
				Metadata  map[string]string `json:"metadata"`
			}
			st, body := adminCall(t, b, "GET", "/admin/keys/"+id, "")
			if err := json.Unmarshal(body, &k); err != nil || st != 200 || k.RevokedAt == nil {
				t.Fatalf("%s answered 204 to DELETE and then reads %d %s (PATCH answered %d)", id, st, body, pat.status)
			}
			if pat.status == 200 && k.Metadata["raced"] != "yes" {
				t.Fatalf("%s: PATCH answered 200, its change is lost: %v", id, k.Metadata)
			}
		}
	})
	t.Run("rotate on one replica, PATCH on the other", func(t *testing.T) {
		ids, secrets := issue()
		got := raceOn(t, ids, a, b,
			func(id string) (string, string, string) { return "POST", "/admin/keys/" + id + "/rotate", `{}` },
			func(id string) (string, string, string) { return "PATCH", "/admin/keys/" + id, `{"name":"patched"}` })
		for i, id := range ids {
			rot, pat := got[i][0], got[i][1]
			var v struct{ Key, Name string }
			if err := json.Unmarshal(rot.body, &v); err != nil || rot.status != 200 || v.Key == "" || pat.status != 200 {
				t.Fatalf("%s: rotate %d %s, PATCH %d %s", id, rot.status, rot.body, pat.status, pat.body)
			}
			for _, g := range []*gateway{a, b} {
				within(t, time.Second, "the old secret refused on "+g.url, func() bool { return authOn(t, g, secrets[i]) == 401 })
				if st := authOn(t, g, v.Key); st != 200 {
					t.Fatalf("%s: the rotated secret answered %d on %s", id, st, g.url)
				}
			}
			_, body := adminCall(t, a, "GET", "/admin/keys/"+id, "")
			if err := json.Unmarshal(body, &v); err != nil || v.Name != "patched" {
				t.Fatalf("%s: PATCH answered 200, its change is lost: %s", id, body)
			}
		}
	})
	t.Run("a rotation on each replica", func(t *testing.T) {
		ids, _ := issue()
		rotate := func(id string) (string, string, string) {
			return "POST", "/admin/keys/" + id + "/rotate", `{"grace":"1h"}`
		}
		got := raceOn(t, ids, a, b, rotate, rotate)
		for i, id := range ids {
			for _, c := range got[i] {
				var v struct{ Key string }
				switch {
				case c.status == 409 && c.code() == "key_conflict":
				case c.status == 200 && json.Unmarshal(c.body, &v) == nil:
					for _, g := range []*gateway{a, b} {
						within(t, time.Second, "a rotation's secret works on "+g.url, func() bool { return authOn(t, g, v.Key) == 200 })
					}
				default:
					t.Fatalf("%s: a rotation answered %d %s", id, c.status, c.body)
				}
			}
		}
	})
}
