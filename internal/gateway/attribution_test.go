package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// Every receipt says whom to bill (docs/spend.md): the key's name beside
// its id, the end user the client named (OpenAI's user, Anthropic's
// metadata.user_id) and the tags of X-Oncegate-Tags and the body's
// metadata.tags. The tags never reach a provider; the rest of metadata
// and the user do, where the provider has the field.
func TestReceiptsCarryUserTagsAndKeyName(t *testing.T) {
	t.Parallel()
	var tap bodyTap
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, front: tap.front}, func(t *testing.T, e *env) {
		v := e.issue(`{"tenant":"acme","name":"search-app"}`)
		var hdr http.Header
		cl := e.openai(&hdr, option.WithAPIKey(v.Key), option.WithHeader("X-Oncegate-Tags", "search, beta"),
			option.WithJSONSet("metadata", map[string]any{"tags": []string{"beta", "eu"}, "team": "x"}))
		params := oaParams("chat", "who pays for this?")
		params.User = openai.String("u-42")
		if _, err := cl.Chat.Completions.New(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		rc := e.receiptAs(v.Key, hdr.Get("X-Oncegate-Request-Id"))
		if rc.KeyID != v.ID || rc.KeyName != "search-app" || rc.User != "u-42" || !slices.Equal(rc.Tags, []string{"search", "beta", "eu"}) {
			t.Fatalf("receipt key %q %q user %q tags %q, want %s search-app u-42 [search beta eu]", rc.KeyID, rc.KeyName, rc.User, rc.Tags, v.ID)
		}
		if n := tap.containing(`"tags"`); n != 0 {
			t.Fatalf("%d upstream bodies carried the tags", n)
		}
		if tap.containing(`"team":"x"`) != 1 || tap.containing(`"user":"u-42"`) != 1 {
			t.Fatalf("the rest of metadata or the user did not reach the OpenAI route: %q", tap.bodies)
		}
		// A rename later leaves the receipt's name as it was.
		if st, b := e.adminDo(keyAdmin, "PATCH", "/admin/keys/"+v.ID, `{"name":"renamed"}`, nil); st != 200 {
			t.Fatalf("rename: %d %s", st, b)
		}
		if rc := e.receiptAs(v.Key, hdr.Get("X-Oncegate-Request-Id")); rc.KeyName != "search-app" {
			t.Fatalf("after a rename the receipt says %q", rc.KeyName)
		}

		// Anthropic's client: metadata.user_id is the user; LiteLLM's
		// metadata.tags beside it are taken out before the OpenAI route
		// the alias translates to.
		var ah http.Header
		ac := e.anthropicClient(&ah, aopt.WithHeader("X-Oncegate-Tags", "research"), aopt.WithJSONSet("metadata.tags", []string{"eu"}))
		if _, err := ac.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "chat", MaxTokens: 64,
			Metadata: anthropic.MetadataParam{UserID: anthropic.String("u-7")},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("and this?"))}}); err != nil {
			t.Fatal(err)
		}
		rc = e.receipt(ah.Get("X-Oncegate-Request-Id"))
		if rc.KeyID != "" || rc.KeyName != "" || rc.User != "u-7" || !slices.Equal(rc.Tags, []string{"research", "eu"}) {
			t.Fatalf("anthropic receipt key %q %q user %q tags %q, want no key, u-7, [research eu]", rc.KeyID, rc.KeyName, rc.User, rc.Tags)
		}
		if n := tap.containing(`"tags"`); n != 0 || tap.containing(`"user":"u-7"`) != 1 {
			t.Fatalf("translated body: %d with tags, user u-7 in %d", n, tap.containing(`"user":"u-7"`))
		}
	})
}

// Tags that break the limits are refused by name before any provider is
// called.
func TestBadTagsAreRefusedByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mock.Config{})
	many := make([]string, 17)
	for i := range many {
		many[i] = "t" + string(rune('a'+i))
	}
	for i, c := range []struct{ header, metadata, param string }{
		{strings.Join(many, ","), "", "X-Oncegate-Tags"},
		{strings.Join(many[:10], ","), `,"metadata":{"tags":["` + strings.Join(many[10:], `","`) + `"]}`, "metadata.tags"},
		{strings.Repeat("x", 65), "", "X-Oncegate-Tags"},
		{"", `,"metadata":{"tags":"a,b"}`, "metadata.tags"},
		{"", `,"metadata":{"tags":["ok","\u0007bell"]}`, "metadata.tags"},
		{"", `,"metadata":{"tags":[""]}`, "metadata.tags"},
	} {
		headers := map[string]string{}
		if c.header != "" {
			headers["X-Oncegate-Tags"] = c.header
		}
		before := e.primary.Stats().Requests
		res, body := e.post("/v1/chat/completions", distinctBody("chat", i, c.metadata), headers)
		var got struct {
			Error struct{ Param, Message string }
		}
		_ = json.Unmarshal(body, &got)
		if res.StatusCode != 400 || got.Error.Param != c.param {
			t.Errorf("%d: %d param %q (%s), want 400 naming %s", i, res.StatusCode, got.Error.Param, body, c.param)
		}
		if n := e.primary.Stats().Requests - before; n != 0 {
			t.Errorf("%d: %d upstream calls for a refused request", i, n)
		}
	}
}
