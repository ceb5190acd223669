package openai

import (
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/provider"
)

func TestRequestPathsAndAuth(t *testing.T) {
	ep, err := Chat.Open(provider.Config{Provider: &config.Provider{BaseURL: "https://api.openai.com/v1/"}, APIKey: "sk-x", KeySource: "OPENAI_API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.BaseURL() != "https://api.openai.com/v1" || ep.Auth().Describe() != "Authorization Bearer from OPENAI_API_KEY" {
		t.Fatalf("base %q auth %q", ep.BaseURL(), ep.Auth().Describe())
	}
	chat, _ := provider.ParseRequest(provider.OpenAI, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	emb, _ := provider.ParseRequest(provider.Embeddings, []byte(`{"model":"m","input":"hi"}`))
	for in, want := range map[*provider.ClientRequest]string{chat: "/chat/completions", emb: "/embeddings"} {
		out, err := ep.Request(in, provider.Target{Model: "gpt"}, nil)
		if err != nil || out.Path != want {
			t.Errorf("%s: %+v %v", in.Protocol, out, err)
		}
	}
	rs, _ := Responses.Open(provider.Config{Provider: &config.Provider{BaseURL: "http://x"}})
	if _, err := rs.Request(chat, provider.Target{Model: "gpt"}, nil); err == nil {
		t.Error("a stateful route builds no chat request")
	}
	if !Responses.Spec().Stateful || Chat.Spec().Stateful || !Chat.Spec().Embeddings {
		t.Error("capabilities")
	}
}
