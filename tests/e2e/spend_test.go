package e2e

import (
	"encoding/json"
	"testing"
	"time"

	oaopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// Chargeback on PostgreSQL (docs/spend.md): requests with users and tags
// made through two replicas, with two named keys and the tenant's own;
// the spend report by tag, user, key name and month, asked of either
// replica, equals the sums of the receipts to the nano-dollar.
func TestSpendReportAgreesWithReceiptsOnPostgres(t *testing.T) {
	f := newFleet(t, 2, mock.Config{Tokens: 7}, "")
	_, search := issueOn(t, f.gws[0], `{"tenant":"e2e","name":"search"}`)
	_, billing := issueOn(t, f.gws[1], `{"tenant":"e2e","name":"billing"}`)
	for i, c := range []struct{ key, user, tags string }{
		{search, "ana", "team-a,eu"}, {search, "ben", "team-a"}, {billing, "ana", "team-b,eu"}, {billing, "", ""}, {apiKey, "cy", "team-b"}, {search, "ana", "eu"},
	} {
		if _, err := chatAs(f.gws[i%2], c.key, "what does this cost? "+string(rune('a'+i)),
			oaopt.WithHeader("X-Oncegate-Tags", c.tags), oaopt.WithJSONSet("user", c.user)); err != nil {
			t.Fatal(err)
		}
	}
	st, body := adminCall(t, f.gws[0], "GET", "/v1/receipts?limit=100", "")
	var list struct {
		Data []struct {
			Tenant  string    `json:"tenant"`
			KeyName string    `json:"key_name"`
			User    string    `json:"user"`
			Tags    []string  `json:"tags"`
			Created time.Time `json:"created_at"`
			Totals  struct {
				CostUSD float64 `json:"cost_usd"`
			}
		}
	}
	if err := json.Unmarshal(body, &list); st != 200 || err != nil || len(list.Data) != 6 {
		t.Fatalf("receipts: %d %v %s", st, err, body)
	}
	want := map[string]map[string]int64{"tag": {}, "user": {}, "key_name": {}, "month": {}}
	for _, rc := range list.Data {
		cost := int64(gw.NanoFromUSD(rc.Totals.CostUSD))
		tags := rc.Tags
		if len(tags) == 0 {
			tags = []string{""}
		}
		for _, tag := range tags {
			want["tag"][tag] += cost
		}
		want["user"][rc.User] += cost
		want["key_name"][rc.KeyName] += cost
		want["month"][rc.Created.UTC().Format("2006-01")] += cost
	}
	if len(want["tag"]) != 4 || want["tag"]["eu"] == 0 || len(want["key_name"]) != 3 {
		t.Fatalf("the receipts do not carry what was sent: %v", want)
	}
	for by, groups := range want {
		for _, g := range f.gws {
			st, body := adminCall(t, g, "GET", "/admin/spend?group_by="+by, "")
			var rep struct {
				Data []struct {
					Group   string
					CostUSD float64 `json:"cost_usd"`
				}
			}
			if err := json.Unmarshal(body, &rep); st != 200 || err != nil || len(rep.Data) != len(groups) {
				t.Fatalf("by %s on %s: %d %v %s, want %v", by, g.url, st, err, body, groups)
			}
			for _, r := range rep.Data {
				if got := int64(gw.NanoFromUSD(r.CostUSD)); got != groups[r.Group] || got <= 0 {
					t.Errorf("by %s, %q: report %d nano-USD, receipts %d", by, r.Group, got, groups[r.Group])
				}
			}
		}
	}
}
