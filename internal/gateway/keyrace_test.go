package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// adminAnswer is one admin call's outcome.
type adminAnswer struct {
	status int
	code   string
	body   []byte
	header http.Header
}

func (c adminAnswer) String() string { return fmt.Sprintf("%d %s", c.status, c.body) }

// adminCall sends an admin API request with the admin key and extra
// headers. Unlike adminDo it may be called from any goroutine: a
// transport error is status -1.
func (e *env) adminCall(method, path, body string, header map[string]string) adminAnswer {
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyAdmin)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := e.client.Do(req)
	if err != nil {
		return adminAnswer{status: -1, body: []byte(err.Error())}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var er struct{ Error struct{ Code string } }
	_ = json.Unmarshal(b, &er)
	return adminAnswer{status: res.StatusCode, code: er.Error.Code, body: b, header: res.Header}
}

// authenticates reports whether secret is a usable key now: GET
// /v1/models answers 200 (401 otherwise; nothing goes upstream).
func (e *env) authenticates(secret string) bool {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 && res.StatusCode != 401 {
		e.t.Fatalf("GET /v1/models: %d", res.StatusCode)
	}
	return res.StatusCode == 200
}

// readKeyView reads key id through the admin API.
func (e *env) readKeyView(id string) admin.KeyView {
	e.t.Helper()
	var v admin.KeyView
	if st, b := e.adminDo(keyAdmin, "GET", "/admin/keys/"+id, "", &v); st != 200 {
		e.t.Fatalf("read %s: %d %s", id, st, b)
	}
	return v
}

// adminReq is an admin request a race sends.
type adminReq struct{ method, path, body string }

// raceKeys issues rounds keys and, for each, sends a's and b's requests
// at once — every round's together, so that they interleave in the
// store — then checks each key's two answers.
func raceKeys(t *testing.T, e *env, rounds int, a, b func(v admin.KeyView) adminReq, check func(t *testing.T, v admin.KeyView, ra, rb adminAnswer)) {
	t.Helper()
	keys := make([]admin.KeyView, rounds)
	for i := range keys {
		keys[i] = e.issue(`{"tenant":"acme","name":"raced","metadata":{"seed":"1"}}`)
	}
	got := make([][2]adminAnswer, rounds)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, v := range keys {
		for j, f := range []func(admin.KeyView) adminReq{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := f(v)
				<-start
				got[i][j] = e.adminCall(r.method, r.path, r.body, nil)
			}()
		}
	}
	close(start)
	wg.Wait()
	for i, v := range keys {
		check(t, v, got[i][0], got[i][1])
	}
}

func patch(body string) func(admin.KeyView) adminReq {
	return func(v admin.KeyView) adminReq { return adminReq{"PATCH", "/admin/keys/" + v.ID, body} }
}

func rotate(body string) func(admin.KeyView) adminReq {
	return func(v admin.KeyView) adminReq { return adminReq{"POST", "/admin/keys/" + v.ID + "/rotate", body} }
}

func revoke(v admin.KeyView) adminReq { return adminReq{"DELETE", "/admin/keys/" + v.ID, ""} }

// secretOf is the secret a rotation answered.
func secretOf(t *testing.T, c adminAnswer) string {
	t.Helper()
	var v admin.KeyView
	if err := json.Unmarshal(c.body, &v); err != nil || v.Key == "" {
		t.Fatalf("a rotation's answer without a secret: %s", c)
	}
	return v.Key
}

// Admin writes racing on one key, many times over: a revocation is final,
// no 200 loses its change, and a rotation's new secret works while the
// old one obeys its grace.
func TestKeyWritesRacing(t *testing.T) {
	e := newEnv(t, mock.Config{})
	const rounds = 24
	t.Run("a revocation racing a PATCH stays", func(t *testing.T) {
		raceKeys(t, e, rounds, revoke, patch(`{"metadata":{"raced":"yes"}}`), func(t *testing.T, v admin.KeyView, del, pat adminAnswer) {
			if del.status != 204 {
				t.Errorf("DELETE: %s", del)
			}
			if pat.status != 200 && (pat.status != 409 || pat.code != api.CodeKeyRevoked) {
				t.Errorf("PATCH racing a revocation: %s, want 200 or 409 %s", pat, api.CodeKeyRevoked)
			}
			got := e.readKeyView(v.ID)
			if got.RevokedAt == nil || e.authenticates(v.Key) {
				t.Errorf("key %s answered 204 to DELETE, yet it is not revoked (revoked_at %v; PATCH %d)", v.ID, got.RevokedAt, pat.status)
			}
			if pat.status == 200 && got.Metadata["raced"] != "yes" {
				t.Errorf("PATCH answered 200, its change is lost: %v", got.Metadata)
			}
		})
	})
	t.Run("a revocation racing a rotation stays", func(t *testing.T) {
		raceKeys(t, e, rounds, revoke, rotate(`{"grace":"1h"}`), func(t *testing.T, v admin.KeyView, del, rot adminAnswer) {
			if del.status != 204 {
				t.Errorf("DELETE: %s", del)
			}
			if rot.status != 200 && (rot.status != 409 || rot.code != api.CodeKeyRevoked) {
				t.Errorf("rotate racing a revocation: %s, want 200 or 409 %s", rot, api.CodeKeyRevoked)
			}
			if e.readKeyView(v.ID).RevokedAt == nil || e.authenticates(v.Key) {
				t.Errorf("key %s answered 204 to DELETE, yet its first secret works (rotate %d)", v.ID, rot.status)
			}
			if rot.status == 200 && e.authenticates(secretOf(t, rot)) {
				t.Errorf("key %s answered 204 to DELETE, yet its rotated secret works", v.ID)
			}
		})
	})
	t.Run("a rotation racing a PATCH keeps both", func(t *testing.T) {
		raceKeys(t, e, rounds, rotate(`{}`), patch(`{"name":"patched"}`), func(t *testing.T, v admin.KeyView, rot, pat adminAnswer) {
			switch {
			case rot.status == 200:
				if !e.authenticates(secretOf(t, rot)) || e.authenticates(v.Key) {
					t.Errorf("rotate answered 200: the new secret works %v, the old one (no grace) %v",
						e.authenticates(secretOf(t, rot)), e.authenticates(v.Key))
				}
			case rot.status == 409 && rot.code == api.CodeKeyConflict:
				if !e.authenticates(v.Key) {
					t.Error("rotate answered 409, yet the old secret stopped working")
				}
			default:
				t.Errorf("rotate: %s", rot)
			}
			name := e.readKeyView(v.ID).Name
			switch {
			case pat.status == 200 && name != "patched":
				t.Errorf("PATCH answered 200, its change is lost: name %q", name)
			case pat.status == 409 && pat.code == api.CodeKeyConflict && name == "patched":
				t.Error("PATCH answered 409, yet it changed the key")
			case pat.status != 200 && pat.status != 409:
				t.Errorf("PATCH: %s", pat)
			}
		})
	})
	t.Run("no rotation answers a secret that does not work", func(t *testing.T) {
		// With a grace, every secret either rotation answered works, and
		// so does the first: two rotations one after the other keep
		// both, and of two based on one version one answers 409.
		raceKeys(t, e, rounds, rotate(`{"grace":"1h"}`), rotate(`{"grace":"1h"}`), func(t *testing.T, v admin.KeyView, a, b adminAnswer) {
			if a.status == 409 {
				a, b = b, a
			}
			if a.status != 200 || (b.status != 200 && (b.status != 409 || b.code != api.CodeKeyConflict)) {
				t.Errorf("two rotations: %s and %s, want 200 and 200 or 409 %s", a, b, api.CodeKeyConflict)
				return
			}
			for _, c := range []adminAnswer{a, b} {
				if c.status == 200 && !e.authenticates(secretOf(t, c)) {
					t.Errorf("a rotation answered 200 with a secret that does not work (the other answered %d)", b.status)
				}
			}
			if !e.authenticates(v.Key) {
				t.Error("the first secret stopped working within its grace")
			}
		})
	})
	t.Run("PATCHes of different fields each keep their change", func(t *testing.T) {
		raceKeys(t, e, rounds, patch(`{"name":"renamed"}`), patch(`{"metadata":{"team":"b"}}`), func(t *testing.T, v admin.KeyView, a, b adminAnswer) {
			got := e.readKeyView(v.ID)
			for _, c := range []struct {
				call    adminAnswer
				kept    bool
				what    string
				applied string
			}{{a, got.Name == "renamed", "name", got.Name}, {b, got.Metadata["team"] == "b", "metadata", fmt.Sprint(got.Metadata)}} {
				switch {
				case c.call.status == 200 && !c.kept:
					t.Errorf("PATCH of %s answered 200, its change is lost: %s", c.what, c.applied)
				case c.call.status == 409 && c.call.code == api.CodeKeyConflict && c.kept:
					t.Errorf("PATCH of %s answered 409, yet changed the key", c.what)
				case c.call.status != 200 && c.call.status != 409:
					t.Errorf("PATCH of %s: %s", c.what, c.call)
				}
			}
		})
	})
}

// readTogether holds every write of a key until n reads of it were made:
// n admin calls on one key then all read the same version before any of
// them writes — the interleaving in which a write that is not
// conditional on the version loses another's change.
type readTogether struct {
	ledger.Store
	n     int
	mu    sync.Mutex
	reads map[string]int
	ready map[string]chan struct{}
}

func (s *readTogether) gate(id string) chan struct{} {
	if s.ready[id] == nil {
		s.ready[id] = make(chan struct{})
	}
	return s.ready[id]
}

func (s *readTogether) Key(ctx context.Context, id string) (*ledger.Key, error) {
	k, err := s.Store.Key(ctx, id)
	s.mu.Lock()
	if s.reads[id]++; s.reads[id] == s.n {
		close(s.gate(id))
	}
	s.mu.Unlock()
	return k, err
}

func (s *readTogether) UpdateKey(ctx context.Context, k *ledger.Key) error {
	s.mu.Lock()
	gate := s.gate(k.ID)
	s.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.UpdateKey(ctx, k)
}

// Two admin calls that read one version of a key before either writes:
// of two rotations one wins and the other answers 409 key_conflict;
// PATCHes of different fields, and a rotation and a PATCH, both keep
// their change.
func TestKeyWritesBasedOnOneVersion(t *testing.T) {
	gated := &readTogether{n: 2, reads: map[string]int{}, ready: map[string]chan struct{}{}}
	e := newEnvOpts(t, envOptions{wrap: func(s ledger.Store) ledger.Store { gated.Store = s; return gated }})
	t.Run("two rotations", func(t *testing.T) {
		raceKeys(t, e, 1, rotate(`{}`), rotate(`{}`), func(t *testing.T, v admin.KeyView, a, b adminAnswer) {
			if a.status == 409 {
				a, b = b, a
			}
			if a.status != 200 || b.status != 409 || b.code != api.CodeKeyConflict {
				t.Fatalf("two rotations of one version: %s and %s, want one 200 and one 409 %s", a, b, api.CodeKeyConflict)
			}
			if !e.authenticates(secretOf(t, a)) || e.authenticates(v.Key) {
				t.Fatal("the winning rotation's secret does not work, or the old one (no grace) still does")
			}
		})
	})
	t.Run("PATCHes of different fields", func(t *testing.T) {
		raceKeys(t, e, 1, patch(`{"name":"renamed"}`), patch(`{"metadata":{"team":"b"}}`), func(t *testing.T, v admin.KeyView, a, b adminAnswer) {
			got := e.readKeyView(v.ID)
			if a.status != 200 || b.status != 200 || got.Name != "renamed" || got.Metadata["team"] != "b" || got.Version != 3 {
				t.Fatalf("two PATCHes of one version: %s and %s; the key: %+v", a, b, got)
			}
		})
	})
	t.Run("a rotation and a PATCH", func(t *testing.T) {
		raceKeys(t, e, 1, rotate(`{}`), patch(`{"name":"renamed"}`), func(t *testing.T, v admin.KeyView, rot, pat adminAnswer) {
			if rot.status != 200 || pat.status != 200 || e.readKeyView(v.ID).Name != "renamed" {
				t.Fatalf("a rotation and a PATCH of one version: %s and %s", rot, pat)
			}
			if !e.authenticates(secretOf(t, rot)) || e.authenticates(v.Key) {
				t.Fatal("the rotation's secret does not work, or the old one (no grace) still does")
			}
		})
	})
}
