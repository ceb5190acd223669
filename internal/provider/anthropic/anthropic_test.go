package anthropic

import (
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/provider"
)

func TestRequestHeadersAndAuth(t *testing.T) {
	ep, err := Messages.Open(provider.Config{Provider: &config.Provider{BaseURL: "https://api.anthropic.com/"}, APIKey: "sk-ant", KeySource: "ANTHROPIC_API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.BaseURL() != "https://api.anthropic.com" || ep.Auth().Describe() != "x-api-key from ANTHROPIC_API_KEY" {
		t.Fatalf("base %q auth %q", ep.BaseURL(), ep.Auth().Describe())
	}
	an, _ := provider.ParseRequest(provider.Anthropic, []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	oa, _ := provider.ParseRequest(provider.OpenAI, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	for _, c := range []struct {
		in   *provider.ClientRequest
		beta string
	}{{an, "tools-2024"}, {oa, ""}} {
		out, err := ep.Request(c.in, provider.Target{Model: "claude", MaxOutputTokens: 100, Beta: "tools-2024"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out.Path != "/v1/messages" || out.Header.Get("anthropic-version") != provider.AnthropicVersion || out.Header.Get("anthropic-beta") != c.beta {
			t.Errorf("%s client: %s %v", c.in.Protocol, out.Path, out.Header)
		}
	}
	count, err := ep.(provider.TokenCounter).CountRequest([]byte(`{"model":"alias","messages":[]}`), "claude", "")
	if err != nil || count.Path != "/v1/messages/count_tokens" || string(count.Body) != `{"model":"claude","messages":[]}` {
		t.Fatalf("count %+v %v", count, err)
	}
	if a, _ := Messages.Open(provider.Config{Provider: &config.Provider{BaseURL: "http://x"}}); a.Auth() != nil {
		t.Error("no key, no auth step")
	}
}
