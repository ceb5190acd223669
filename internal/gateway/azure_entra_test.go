package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// azure-openai with auth: entra end to end (docs/providers.md): the
// gateway obtains Microsoft Entra ID tokens from the mock's Entra fake,
// served over TLS as azidentity requires, and the mock's Azure OpenAI
// fake takes only the bearer tokens that fake issued. The credential is
// an app registration's client secret from the environment, so these
// tests set variables and do not run in parallel.

// entraOther is a second app registration of the mock's tenant, whose
// secret is not the one in the environment.
const entraOther = "5b0c7d1e-0000-4000-8000-0000000a0b1e"

const entraConfig = `
admin_key_env: KEY_ADMIN
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - id: azure-entra
    type: azure-openai
    base_url: "PRIMARY"
    api_version: "2024-10-21"
    auth: entra
    tenant_id: "` + mock.DefaultEntraTenant + `"
    client_id: "` + mock.DefaultEntraClient + `"
    timeouts: {connect: 1s, first_byte: 2s, idle: 2s}
  - {id: azure-entra-refused, type: azure-openai, base_url: "PRIMARY", auth: entra, tenant_id: "` + mock.DefaultEntraTenant + `", client_id: "` + entraOther + `", timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
  - {id: azure-v1, type: azure-openai, base_url: "FALLBACK", api_key_env: KEY_AZURE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - {id: entra, provider: azure-entra, model: gpt-4o-entra, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: refused, provider: azure-entra-refused, model: gpt-4o-refused, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 2, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
  - {id: v1, provider: azure-v1, model: gpt-4o-v1, capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 128000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 1, price: {input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}}
models:
  - name: chat
    routes: [entra]
    retry: {max_attempts: 2, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: refused-first
    routes: [refused, v1]
    retry: {max_attempts: 4, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
  - name: refused-only
    routes: [refused]
    retry: {max_attempts: 4, base_delay: 10ms, max_delay: 40ms, jitter: none, deadline: 10s}
`

// entraEnv starts a gateway on entraConfig whose token authority is the
// primary mock's Entra fake (tokens living ttl), with the app
// registration's secret in the environment.
func entraEnv(t *testing.T, ttl time.Duration, logs *syncBuffer) (*env, *seen) {
	t.Helper()
	t.Setenv("AZURE_CLIENT_SECRET", mock.DefaultEntraSecret)
	t.Setenv("AZURE_TOKEN_CREDENTIALS", "prod") // never a developer's own az login
	s := &seen{}
	o := envOptions{mock: mock.Config{Tokens: 8, Entra: mock.EntraConfig{TokenTTL: ttl, Others: map[string]string{entraOther: "another-apps-secret"}}},
		config: entraConfig, front: s.front, entra: true}
	if logs != nil {
		o.logs = logs
	}
	return newEnvOpts(t, o), s
}

// bearer is the token an upstream request carried, holding it to the
// Azure contract: a bearer token, no api-key, nothing of the client's.
func bearer(t *testing.T, r *http.Request) string {
	t.Helper()
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || r.Header.Get("api-key") != "" || strings.Contains(tok, keyAcme) {
		t.Fatalf("upstream auth headers: Authorization %q api-key %q", r.Header.Get("Authorization"), r.Header.Get("api-key"))
	}
	return tok
}

// One token serves many requests, streamed or not: the gateway fetched
// it once and sent it as the bearer on each.
func TestAzureEntraIDOneTokenServesRequests(t *testing.T) {
	e, s := entraEnv(t, time.Hour, nil)
	var h http.Header
	c := e.openai(&h)
	ctx := context.Background()
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hello entra")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content == "" || h.Get("X-Oncegate-Route") != "entra" {
		t.Fatalf("answer %+v route %q", res, h.Get("X-Oncegate-Route"))
	}
	first := bearer(t, s.last(t))
	if s.last(t).URL.Path != "/openai/deployments/gpt-4o-entra/chat/completions" {
		t.Errorf("path %s", s.last(t).URL.Path)
	}

	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("stream entra"),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" {
		t.Fatal("no streamed answer")
	}
	if second := bearer(t, s.last(t)); second != first {
		t.Error("the second request carried another token")
	}
	if n := e.primary.EntraTokensIssued(); n != 1 {
		t.Fatalf("%d tokens issued for two requests, want 1", n)
	}
	if p := e.primary.Requests(); p != 2 {
		t.Fatalf("upstream calls %d, want 2", p)
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 1 || rc.Attempts[0].Kind != "ok" || rc.Attempts[0].Usage.OutputTokens == 0 {
		t.Fatalf("receipt %+v", rc.Attempts)
	}
}

// A token close to its expiry is still used while a new one is fetched
// in the background; the new one serves what follows, and no request
// waited for it.
func TestAzureEntraIDTokenRefreshedBeforeExpiry(t *testing.T) {
	e, s := entraEnv(t, 4*time.Minute, nil) // inside the five minutes before expiry when issued
	c := e.openai(nil)
	ctx := context.Background()
	ask := func(text string) string {
		t.Helper()
		if _, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg(text)}); err != nil {
			t.Fatal(err)
		}
		return bearer(t, s.last(t))
	}
	first := ask("first")
	if n := e.primary.EntraTokensIssued(); n != 1 {
		t.Fatalf("%d tokens issued, want 1", n)
	}
	e.primary.SetEntraTokenTTL(time.Hour)
	if second := ask("second"); second != first {
		t.Fatal("the request waited for the refresh instead of using the valid token")
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.primary.AwaitEntraTokens(wait, 2); err != nil {
		t.Fatal(err)
	}
	// The refreshed token is stored as the mock's answer arrives: the
	// next requests carry it, with no fetch of their own.
	var got string
	for range 50 {
		if got = ask("after the refresh"); got != first {
			break
		}
	}
	if got == first {
		t.Fatal("the refreshed token was never used")
	}
	if n := e.primary.EntraTokensIssued(); n != 2 {
		t.Fatalf("%d tokens issued, want 2", n)
	}
}

// A credential Entra ID refuses (another app's secret) refuses the
// route's account: the next route serves, or the client gets
// 502 upstream_auth_failed; nothing was sent to the refused route, and
// no secret or token reaches the answer, the receipt or the logs.
func TestAzureEntraIDRefusedCredential(t *testing.T) {
	logs := &syncBuffer{}
	e, _ := entraEnv(t, time.Hour, logs)
	var h http.Header
	c := e.openai(&h)
	res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "refused-first", Messages: userMsg("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content == "" || h.Get("X-Oncegate-Route") != "v1" {
		t.Fatalf("answer %+v route %q", res, h.Get("X-Oncegate-Route"))
	}
	if p, f := e.primary.Requests(), e.fallback.Requests(); p != 0 || f != 1 {
		t.Fatalf("upstream calls: primary %d fallback %d, want 0 and 1", p, f)
	}
	rc := e.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 2 || rc.Attempts[0].Kind != string(gw.KindAccountRefused) || rc.Attempts[0].Cause != string(gw.CauseUpstreamAuth) || rc.Attempts[1].Route != "v1" {
		t.Fatalf("receipt %+v", rc.Attempts)
	}
	first, _ := json.Marshal(rc)

	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "refused-only", Messages: userMsg("hello again")})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadGateway || ae.Code != api.CodeUpstreamAuthFailed {
		t.Fatalf("want 502 %s, got %v", api.CodeUpstreamAuthFailed, err)
	}
	rc = e.receipt(ae.Response.Header.Get("X-Oncegate-Request-Id"))
	if len(rc.Attempts) != 1 || rc.Attempts[0].Kind != string(gw.KindAccountRefused) {
		t.Fatalf("a refused credential is not retried on its route: %+v", rc.Attempts)
	}
	second, _ := json.Marshal(rc)
	if e.primary.EntraTokensIssued() != 0 || e.primary.Requests() != 0 {
		t.Fatalf("tokens %d, upstream calls %d: want none", e.primary.EntraTokensIssued(), e.primary.Requests())
	}
	for what, text := range map[string]string{"answer": ae.RawJSON(), "receipt": string(first) + string(second), "logs": logs.String()} {
		for _, secret := range []string{mock.DefaultEntraSecret, "another-apps-secret", "entra-mock-", "Trace ID"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds %q: %s", what, secret, text)
			}
		}
	}
}
