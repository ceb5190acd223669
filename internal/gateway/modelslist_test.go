package gateway

import (
	"context"
	"slices"
	"testing"

	oopt2 "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// GET /v1/models lists what the key that asks may use: a virtual key's
// models, and its team's, narrow the list and the reads of one model as
// they narrow the requests (403 model_not_allowed); the tenant's own key
// lists every alias inside its boundary.
func TestTheModelListIsWhatTheKeyMayUse(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	listAs := func(key string) []string {
		t.Helper()
		c := e.openai(nil, oopt2.WithAPIKey(key))
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatalf("list as %.8s…: %v", key, err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		slices.Sort(ids)
		return ids
	}
	tenantSees := listAs(keyAcme)
	if !slices.Contains(tenantSees, "chat") || !slices.Contains(tenantSees, "chat-restart") {
		t.Fatalf("the tenant's key lists %v: the test needs chat and chat-restart", tenantSees)
	}
	narrow := e.issue(`{"tenant":"acme","models":["chat"]}`)
	if got := listAs(narrow.Key); !slices.Equal(got, []string{"chat"}) {
		t.Fatalf("a key for chat alone lists %v", got)
	}
	e.createTeam(`{"id":"team-m","models":["chat","chat-stop"]}`)
	team := e.issue(`{"tenant":"team-m"}`)
	if got := listAs(team.Key); !slices.Equal(got, []string{"chat", "chat-stop"}) {
		t.Fatalf("a key of a team of chat and chat-stop lists %v", got)
	}
	teamNarrow := e.issue(`{"tenant":"team-m","models":["chat-stop"]}`)
	if got := listAs(teamNarrow.Key); !slices.Equal(got, []string{"chat-stop"}) {
		t.Fatalf("a team key for chat-stop alone lists %v", got)
	}
	for _, c := range []struct {
		key, model string
		status     int
	}{
		{narrow.Key, "chat", 200}, {narrow.Key, "chat-restart", 404},
		{team.Key, "chat-stop", 200}, {team.Key, "chat-restart", 404},
	} {
		if res, b := e.do("GET", "/v1/models/"+c.model, "", map[string]string{"Authorization": "Bearer " + c.key}); res.StatusCode != c.status {
			t.Fatalf("reading %s as a key that may%s use it: %d %s", c.model, map[bool]string{true: "", false: " not"}[c.status == 200], res.StatusCode, b)
		}
	}
}
