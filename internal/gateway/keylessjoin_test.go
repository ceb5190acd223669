package gateway

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
)

// keylessJoinConfig adds an alias whose keyless requests never join, and
// gives the primary mock time to wait for a test's release.
var keylessJoinConfig = strings.NewReplacer("\nmodels:\n", "\nmodels:\n  - {name: sampler, routes: [primary], keyless_join: false}\n",
	`api_key_env: KEY_UPSTREAM_ONE, timeouts: {connect: 1s, first_byte: 400ms, idle: 1s}`,
	`api_key_env: KEY_UPSTREAM_ONE, timeouts: {connect: 1s, first_byte: 60s, idle: 60s}`).Replace(testConfig)

// Identical keyless requests sent together share one generation unless
// the alias's or the virtual key's keyless_join is false; the narrowest
// set value wins (header, then key, then alias, then the configuration).
func TestKeylessJoinPerAliasAndPerKey(t *testing.T) {
	t.Parallel()
	// The primary mock holds each call until the test has seen all three
	// requests placed — owners upstream, joiners on their flight — so
	// that a request that could join never comes after its twin ended.
	var upstream atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	hold := func(m http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g := gate.Load()
			upstream.Add(1)
			<-*g
			m.ServeHTTP(w, r)
		})
	}
	inBubble(t, envOptions{config: keylessJoinConfig, front: hold, mock: mock.Config{Tokens: 5}}, func(t *testing.T, e *env) {
		solo := e.issue(`{"tenant":"acme","name":"eval","keyless_join":false}`)
		joiner := e.issue(`{"tenant":"acme","name":"joiner","keyless_join":true}`)
		if solo.KeylessJoin == nil || *solo.KeylessJoin {
			t.Fatalf("the key's view: %+v", solo.KeylessJoin)
		}
		// three sends three identical keyless requests at once and
		// counts the generations they cost and the requests they were.
		three := func(key, model, text string, headers map[string]string) (generations int64, requests int) {
			t.Helper()
			before, joinedBefore := e.primary.Stats().Generations, e.gw.metrics.Live("acme").Dedup["joined"]
			release := make(chan struct{})
			gate.Store(&release)
			upstream.Store(0)
			body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + text + `"}]}`
			ids := make([]string, 3)
			var wg sync.WaitGroup
			for i := range ids {
				wg.Go(func() {
					res, b := e.postKey(key, "/v1/chat/completions", body, headers)
					if res.StatusCode != 200 {
						t.Errorf("%s %s: %d %s", model, text, res.StatusCode, b)
					}
					ids[i] = res.Header.Get("X-Oncegate-Request-Id")
				})
			}
			waitFor(t, func() bool { return upstream.Load()+e.gw.metrics.Live("acme").Dedup["joined"]-joinedBefore == 3 })
			close(release)
			wg.Wait()
			distinct := map[string]bool{}
			for _, id := range ids {
				if !distinct[id] {
					distinct[id] = true
					if r := e.receiptAs(key, id); r.Terminal != "succeeded" || len(r.Attempts) != 1 {
						t.Fatalf("%s: receipt %+v", id, r)
					}
				}
			}
			return e.primary.Stats().Generations - before, len(distinct)
		}
		for _, tc := range []struct {
			name, key, model string
			headers          map[string]string
			want             int
		}{
			{"an alias that joins", keyAcme, "solo", nil, 1},
			{"an alias with keyless_join false", keyAcme, "sampler", nil, 3},
			{"a key with keyless_join false", solo.Key, "solo", nil, 3},
			{"a key with keyless_join true, on an alias without", joiner.Key, "sampler", nil, 1},
			{"X-Oncegate-Join: on over the alias", keyAcme, "sampler", map[string]string{"X-Oncegate-Join": "on"}, 1},
			{"X-Oncegate-Join: on over the key", solo.Key, "solo", map[string]string{"X-Oncegate-Join": "on"}, 1},
		} {
			gens, reqs := three(tc.key, tc.model, tc.name, tc.headers)
			if gens != int64(tc.want) || reqs != tc.want {
				t.Errorf("%s: %d generations, %d logical requests (receipts); want %d of each", tc.name, gens, reqs, tc.want)
			}
		}
		// PATCH null gives the key back to its alias's (and the
		// configuration's) choice.
		var v struct {
			KeylessJoin *bool `json:"keyless_join"`
		}
		if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+solo.ID, `{"keyless_join":null}`, &v); st != 200 || v.KeylessJoin != nil {
			t.Fatalf("PATCH null: %d %s", st, b)
		}
		if gens, reqs := three(solo.Key, "solo", "after the patch", nil); gens != 1 || reqs != 1 {
			t.Errorf("a key whose keyless_join was unset: %d generations, %d requests; want 1", gens, reqs)
		}
		if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+solo.ID, `{"keyless_join":"no"}`, nil); st != 400 || !strings.Contains(string(b), "keyless_join") {
			t.Fatalf("PATCH a string: %d %s", st, b)
		}
	})
}
