package gateway

import (
	"encoding/json"
	"net/http"
	"testing"
)

// The admin key reads every tenant's receipts — one by id, or the newest
// across tenants, paged by after, narrowed by ?tenant= — while a tenant's
// key reads only its own.
func TestTheAdminKeyReadsEveryTenantsReceipts(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		acmeRes, _ := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		globexRes, _ := e.postKey(keyGlobex, "/v1/chat/completions", chatBody("chat", false), nil)
		acme, globex := acmeRes.Header.Get("X-Oncegate-Request-Id"), globexRes.Header.Get("X-Oncegate-Request-Id")
		get := func(key, path string) (int, []string) {
			t.Helper()
			req, _ := http.NewRequest("GET", e.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body struct {
				RequestID string `json:"request_id"`
				Tenant    string
				Data      []struct {
					RequestID string `json:"request_id"`
				}
			}
			_ = json.NewDecoder(res.Body).Decode(&body)
			ids := []string{body.RequestID}
			if body.RequestID == "" {
				ids = ids[:0]
				for _, d := range body.Data {
					ids = append(ids, d.RequestID)
				}
			}
			return res.StatusCode, ids
		}
		for _, id := range []string{acme, globex} {
			if st, got := get(keyAdmin, "/v1/receipts/"+id); st != 200 || len(got) != 1 || got[0] != id {
				t.Fatalf("the admin reading %s: %d %v", id, st, got)
			}
		}
		lists := []struct {
			key, query string
			status     int
			want       []string
		}{
			{keyAdmin, "", 200, []string{globex, acme}},
			{keyAdmin, "?limit=1", 200, []string{globex}},
			{keyAdmin, "?limit=1&after=" + globex, 200, []string{acme}},
			{keyAdmin, "?tenant=acme", 200, []string{acme}},
			{keyAdmin, "?tenant=initech", 200, nil},
			{keyAcme, "", 200, []string{acme}},
			{keyAcme, "?tenant=acme", 200, []string{acme}},
			{keyAcme, "?tenant=globex", 400, nil},
			{"nobody", "", 401, nil},
		}
		for _, l := range lists {
			st, got := get(l.key, "/v1/receipts"+l.query)
			if st != l.status || len(got) != len(l.want) {
				t.Fatalf("list%s as %s: %d %v, want %d %v", l.query, l.key, st, got, l.status, l.want)
			}
			for i := range got {
				if got[i] != l.want[i] {
					t.Fatalf("list%s as %s: %v, want %v", l.query, l.key, got, l.want)
				}
			}
		}
		if st, _ := get(keyAcme, "/v1/receipts/"+globex); st != 404 {
			t.Fatalf("acme read globex's receipt: %d", st)
		}
	})
}
