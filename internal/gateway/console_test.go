package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// The console's JSON: the admin key sees every tenant, a tenant's key its
// own; verify runs oncegate verify's check; the live panel has the
// breakers and the counts.
func TestConsoleScopes(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 3}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}))
		acme, _ := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		globex, _ := e.postKey(keyGlobex, "/v1/chat/completions", chatBody("chat", false), nil)
		get := func(key, path string, into any) int {
			req, _ := http.NewRequest("GET", e.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if into != nil {
				_ = json.NewDecoder(res.Body).Decode(into)
			}
			return res.StatusCode
		}
		type list struct {
			Data []struct {
				RequestID string `json:"request_id"`
				Tenant    string
				Attempts  int
				Route     string
			}
		}
		var all, own list
		if get(keyAdmin, "/v1/console/requests", &all) != 200 || len(all.Data) != 2 {
			t.Fatalf("admin sees %d requests", len(all.Data))
		}
		if get(keyAcme, "/v1/console/requests", &own) != 200 || len(own.Data) != 1 || own.Data[0].RequestID != acme.Header.Get("X-Oncegate-Request-Id") ||
			own.Data[0].Route != "primary" || own.Data[0].Attempts != 2 {
			t.Fatalf("acme sees %+v", own.Data)
		}
		if st := get(keyAcme, "/v1/console/requests/"+globex.Header.Get("X-Oncegate-Request-Id"), nil); st != 404 {
			t.Fatalf("acme read globex's receipt: %d", st)
		}
		var filtered list
		get(keyAdmin, "/v1/console/requests?tenant=globex&terminal=succeeded", &filtered)
		if len(filtered.Data) != 1 || filtered.Data[0].RequestID != globex.Header.Get("X-Oncegate-Request-Id") {
			t.Fatalf("filtered: %+v", filtered.Data)
		}
		var v struct {
			OK     bool
			Drifts []any
		}
		if get(keyAdmin, "/v1/console/requests/"+acme.Header.Get("X-Oncegate-Request-Id")+"/verify", &v) != 200 || !v.OK {
			t.Fatalf("verify: %+v", v)
		}
		// The live panel: the admin sees every tenant's figures, every
		// route and the fleet retry budget; a tenant its own figures and
		// the routes it may use, not the budget every tenant's retries
		// fill.
		type liveView struct {
			Requests int64 `json:"logical_requests"`
			Attempts int64
			Tenant   string
			Breakers []struct{ Route, State string }
			Budget   map[string]float64 `json:"retry_budget"`
			Dedup    map[string]int64
		}
		var live, acmeLive, globexLive liveView
		if get(keyAdmin, "/v1/console/live", &live) != 200 || live.Requests != 2 || live.Attempts != 3 || len(live.Breakers) != len(e.pol.Routes) ||
			live.Budget["retries"] != 1 || live.Dedup["miss"] != 2 || live.Tenant != "" {
			t.Fatalf("the admin's live panel: %+v", live)
		}
		if get(keyAcme, "/v1/console/live", &acmeLive) != 200 || acmeLive.Requests != 1 || acmeLive.Attempts != 2 || acmeLive.Dedup["miss"] != 1 ||
			acmeLive.Budget != nil || acmeLive.Tenant != "acme" || len(acmeLive.Breakers) != len(e.pol.Routes) {
			t.Fatalf("acme's live panel: %+v", acmeLive)
		}
		if get(keyGlobex, "/v1/console/live", &globexLive) != 200 || globexLive.Requests != 1 || globexLive.Attempts != 1 || globexLive.Budget != nil ||
			len(globexLive.Breakers) == 0 || len(globexLive.Breakers) == len(e.pol.Routes) {
			t.Fatalf("globex's live panel: %+v", globexLive)
		}
		for _, b := range globexLive.Breakers {
			if r := e.pol.Route(b.Route); r == nil || r.Boundary > gw.BoundaryPrivate {
				t.Fatalf("globex (private) sees the breaker of %s, beyond its data boundary", b.Route)
			}
		}
		if st := get("nobody", "/v1/console/live", nil); st != 401 {
			t.Fatalf("no key: %d", st)
		}
		res, err := e.client.Get(e.url + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := res.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if res.StatusCode != 200 || !strings.Contains(b.String(), `<script src="app.js">`) || res.Header.Get("Content-Security-Policy") == "" {
			t.Fatalf("/ui/: %d", res.StatusCode)
		}
	})
}
