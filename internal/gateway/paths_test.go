package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	oopt2 "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// do sends one request to the gateway with headers, and reads the answer.
func (e *env) do(method, path, body string, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// calls is how many generations the three mocks made for a request.
func (e *env) calls(requestID string) int64 {
	p, f, a := e.upstreamCalls(requestID)
	return p.Generations + f.Generations + a.Generations
}

// receiptCount is how many receipts the acme tenant has.
func (e *env) receiptCount() int {
	e.t.Helper()
	res, b := e.do("GET", "/v1/receipts?limit=100", "", map[string]string{"Authorization": "Bearer " + keyAcme})
	var list struct{ Data []json.RawMessage }
	if res.StatusCode != 200 || json.Unmarshal(b, &list) != nil {
		e.t.Fatalf("receipts: %d %s", res.StatusCode, b)
	}
	return len(list.Data)
}

// The official Go SDK's Azure client, unchanged, against the gateway as
// its Azure OpenAI endpoint: chat (whole and streamed) and embeddings go
// to /openai/deployments/{model}/… with api-version and the api-key
// header; each is one upstream generation and one receipt of its alias.
// (Over loopback HTTP: the Azure client sends keys over plain HTTP only
// to a loopback address, and only when told it may.)
func TestAzureOpenAIClientsWorkUnchanged(t *testing.T) {
	t.Parallel()
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 5}})
	ctx := context.Background()
	var h http.Header
	var paths []string
	c := openai.NewClient(azure.WithEndpoint(e.url, "2024-10-21"), azure.WithAPIKey(keyAcme), azure.WithUnsafeAllowHTTP(),
		oopt2.WithMiddleware(func(r *http.Request, next oopt2.MiddlewareNext) (*http.Response, error) {
			paths = append(paths, r.URL.RequestURI())
			return captureHeaders(&h)(r, next)
		}))
	one := func(what, operation, model string) {
		t.Helper()
		id := h.Get("X-Oncegate-Request-Id")
		r := e.awaitReceipt(id)
		if n := e.calls(id); n != 1 || len(r.Attempts) != 1 || r.Terminal != "succeeded" || r.Operation != operation || r.Model != model {
			t.Fatalf("%s: %d upstream generations, receipt %+v", what, n, r)
		}
	}

	cc, err := c.Chat.Completions.New(ctx, oaParams("chat", "hello azure"))
	if err != nil || cc.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %+v %v", cc, err)
	}
	one("chat", "chat.completions", "chat")

	st := c.Chat.Completions.NewStreaming(ctx, oaParams("chat", "stream azure"))
	var text strings.Builder
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := st.Err(); err != nil || text.Len() == 0 {
		t.Fatalf("stream: %q %v", text.String(), err)
	}
	one("stream", "chat.completions", "chat")

	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("vector me")}})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings: %+v %v", emb, err)
	}
	one("embeddings", "embeddings", "embed")

	want := []string{"/openai/deployments/chat/chat/completions?api-version=2024-10-21", "/openai/deployments/chat/chat/completions?api-version=2024-10-21",
		"/openai/deployments/embed/embeddings?api-version=2024-10-21"}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("the SDK asked for %v, want %v", paths, want)
	}
	if n := e.receiptCount(); n != 3 {
		t.Fatalf("%d receipts for 3 requests", n)
	}

	// The deployment names the alias: a body without a model, or naming
	// another one, is the deployment's.
	azureKey := map[string]string{"api-key": keyAcme}
	for _, body := range []string{`{"messages":[{"role":"user","content":"no model"}]}`,
		`{"model":"gpt-4o","messages":[{"role":"user","content":"another model"}]}`} {
		res, b := e.do("POST", "/openai/deployments/chat-stop/chat/completions?api-version=2099-01-01", body, azureKey)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, res.StatusCode, b)
		}
		if r := e.awaitReceipt(res.Header.Get("X-Oncegate-Request-Id")); r.Model != "chat-stop" {
			t.Fatalf("%s: the receipt's model is %q, want the deployment chat-stop", body, r.Model)
		}
	}
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/openai/deployments/nope/chat/completions", chatBody("chat", false), 404, "model_not_found"},
		{"/openai/deployments/chat/completions", chatBody("chat", false), 404, "not_found"},
		{"/openai/deployments/chat/chat/completions", `{"model":5,"messages":[]}`, 400, "invalid_request_error"},
	} {
		res, b := e.do("POST", tc.path, tc.body, azureKey)
		var eb errorBody
		_ = json.Unmarshal(b, &eb)
		if res.StatusCode != tc.status || (deref(eb.Error.Code) != tc.code && eb.Error.Type != tc.code) {
			t.Fatalf("%s: %d %s; want %d %s in the OpenAI shape", tc.path, res.StatusCode, b, tc.status, tc.code)
		}
	}
}

// Every /v1 endpoint is also served without /v1 and under /openai/v1:
// the OpenAI SDK with a base URL that lacks /v1 (or ends in /openai/v1)
// reaches chat, embeddings, models and receipts; unknown paths stay 404
// and known ones asked with another method 405, in the caller's protocol.
func TestPathsClientsAlreadySpell(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, base := range []string{e.url, e.url + "/openai/v1"} {
			var h http.Header
			c := e.openai(&h, oopt2.WithBaseURL(base))
			cc, err := c.Chat.Completions.New(ctx, oaParams("chat", "no v1 from "+base))
			if err != nil || cc.Choices[0].Message.Content == "" {
				t.Fatalf("%s: chat: %v", base, err)
			}
			id := h.Get("X-Oncegate-Request-Id")
			if n := e.calls(id); n != 1 {
				t.Fatalf("%s: %d upstream generations for one chat", base, n)
			}
			if r := e.receipt(id); r.Model != "chat" || len(r.Attempts) != 1 {
				t.Fatalf("%s: receipt %+v", base, r)
			}
			if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(base)}}); err != nil {
				t.Fatalf("%s: embeddings: %v", base, err)
			}
			if m, err := c.Models.Get(ctx, "chat"); err != nil || m.ID != "chat" {
				t.Fatalf("%s: model: %+v %v", base, m, err)
			}
			if page, err := c.Models.List(ctx); err != nil || len(page.Data) == 0 {
				t.Fatalf("%s: models: %v", base, err)
			}
		}
		// The Anthropic SDK adds /v1 itself: at the gateway's root it is
		// served as it always was; /messages answers too.
		ac := e.anthropicClient(nil)
		if m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 50,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("root"))}}); err != nil || len(m.Content) == 0 {
			t.Fatalf("anthropic: %+v %v", m, err)
		}
		anth := map[string]string{"x-api-key": keyAcme, "anthropic-version": "2023-06-01"}
		msg := `{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":"bare path"}]}`
		if res, b := e.do("POST", "/messages", msg, anth); res.StatusCode != 200 {
			t.Fatalf("/messages: %d %s", res.StatusCode, b)
		}
		if res, b := e.do("POST", "/messages/count_tokens", msg, anth); res.StatusCode != 200 || !strings.Contains(string(b), "input_tokens") {
			t.Fatalf("/messages/count_tokens: %d %s", res.StatusCode, b)
		}
		res, b := e.do("POST", "/chat/completions", chatBody("chat", false), map[string]string{"Authorization": "Bearer " + keyAcme})
		id := res.Header.Get("X-Oncegate-Request-Id")
		if res.StatusCode != 200 || id == "" {
			t.Fatalf("/chat/completions: %d %s", res.StatusCode, b)
		}
		if res, b := e.do("GET", "/receipts/"+id, "", map[string]string{"Authorization": "Bearer " + keyAcme}); res.StatusCode != 200 || !strings.Contains(string(b), id) {
			t.Fatalf("/receipts/{id}: %d %s", res.StatusCode, b)
		}
		if res, b := e.do("GET", "/openai/v1/receipts/"+id, "", map[string]string{"api-key": keyAcme}); res.StatusCode != 200 || !strings.Contains(string(b), id) {
			t.Fatalf("/openai/v1/receipts/{id}: %d %s", res.StatusCode, b)
		}
		for _, tc := range []struct {
			method, path string
			headers      map[string]string
			status       int
			anthropic    bool
		}{
			{"GET", "/chat/completions", map[string]string{"Authorization": "Bearer " + keyAcme}, 405, false},
			{"GET", "/openai/v1/embeddings", map[string]string{"api-key": keyAcme}, 405, false},
			{"POST", "/completions", map[string]string{"Authorization": "Bearer " + keyAcme}, 404, false},
			{"POST", "/openai/v1/nope", map[string]string{"api-key": keyAcme}, 404, false},
			{"POST", "/messages/nope", anth, 404, true},
			{"GET", "/health/nope", nil, 404, false},
		} {
			res, b := e.do(tc.method, tc.path, "", tc.headers)
			var shape map[string]any
			_ = json.Unmarshal(b, &shape)
			if res.StatusCode != tc.status || (shape["type"] == "error") != tc.anthropic || shape["error"] == nil {
				t.Fatalf("%s %s: %d %s; want %d in the caller's protocol", tc.method, tc.path, res.StatusCode, b, tc.status)
			}
		}
	})
}

// The api-key header (the Azure SDK's) authenticates as Authorization and
// x-api-key do; a wrong one is 401.
func TestTheAPIKeyHeaderAuthenticates(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		res, b := e.do("POST", "/v1/chat/completions", chatBody("chat", false), map[string]string{"api-key": keyAcme})
		if res.StatusCode != 200 {
			t.Fatalf("api-key: %d %s", res.StatusCode, b)
		}
		if n := e.calls(res.Header.Get("X-Oncegate-Request-Id")); n != 1 {
			t.Fatalf("%d upstream generations", n)
		}
		res, b = e.do("POST", "/v1/chat/completions", chatBody("chat", false), map[string]string{"api-key": "sk-wrong"})
		var eb errorBody
		if res.StatusCode != 401 || json.Unmarshal(b, &eb) != nil || deref(eb.Error.Code) != "unauthorized" {
			t.Fatalf("a wrong api-key: %d %s; want 401 unauthorized", res.StatusCode, b)
		}
		if st := e.primary.Stats().Requests + e.fallback.Stats().Requests + e.anthropic.Stats().Requests; st != 1 {
			t.Fatalf("%d upstream requests, want the first one alone", st)
		}
	})
}

// The admin key lists every alias on /v1/models (and reads each), where a
// tenant sees those inside its data boundary.
func TestTheAdminKeyListsEveryModel(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		list := func(headers map[string]string) []string {
			t.Helper()
			res, b := e.do("GET", "/v1/models", "", headers)
			var page struct{ Data []struct{ ID string } }
			if res.StatusCode != 200 || json.Unmarshal(b, &page) != nil {
				t.Fatalf("%v: %d %s", headers, res.StatusCode, b)
			}
			var ids []string
			for _, m := range page.Data {
				ids = append(ids, m.ID)
			}
			return ids
		}
		all := list(map[string]string{"Authorization": "Bearer " + keyAdmin})
		if len(all) != len(e.pol.Aliases) {
			t.Fatalf("the admin key sees %d models, want all %d", len(all), len(e.pol.Aliases))
		}
		if globex := list(map[string]string{"Authorization": "Bearer " + keyGlobex}); len(globex) >= len(all) {
			t.Fatalf("globex (private) sees %d of %d: the test needs an alias outside its boundary", len(globex), len(all))
		}
		if res, b := e.do("GET", "/v1/models/claude", "", map[string]string{"Authorization": "Bearer " + keyAdmin}); res.StatusCode != 200 {
			t.Fatalf("the admin key reading a model: %d %s", res.StatusCode, b)
		}
		if res, _ := e.do("GET", "/v1/models", "", map[string]string{"Authorization": "Bearer sk-nobody"}); res.StatusCode != 401 {
			t.Fatalf("an unknown key listing models: %d", res.StatusCode)
		}
	})
}

// While the gateway drains, /health/liveliness answers 200 and
// /health/readiness 503 draining, as /healthz and /readyz do; a new
// request on a path without /v1 is refused as any other.
func TestHealthAliasesDuringADrain(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30, TokenInterval: 15 * time.Millisecond}}, func(t *testing.T, e *env) {
		g := e.gw
		ln, err := e.mem.Listen("draining.test:80")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { _ = g.Serve(ctx, ln); close(stopped) }()
		url := "http://draining.test"
		get := func(path string) (int, string) {
			res, err := e.client.Get(url + path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		for _, p := range []string{"/health/liveliness", "/health/readiness"} {
			if st, body := get(p); st != 200 {
				t.Fatalf("%s before the drain: %d %q", p, st, body)
			}
		}
		req, _ := http.NewRequest("POST", url+"/chat/completions", strings.NewReader(chatBody("chat", true)))
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		cancel() // drain while the stream is in flight
		synctest.Wait()
		for _, tc := range []struct {
			path   string
			status int
		}{{"/health/liveliness", 200}, {"/healthz", 200}, {"/health/readiness", 503}, {"/readyz", 503}} {
			if st, body := get(tc.path); st != tc.status {
				t.Fatalf("%s while draining: %d %q, want %d", tc.path, st, body, tc.status)
			}
		}
		refused, err := e.client.Post(url+"/chat/completions", "application/json", strings.NewReader(chatBody("chat", false)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(refused.Body)
		refused.Body.Close()
		if refused.StatusCode != 503 || !strings.Contains(string(b), "draining") {
			t.Fatalf("a new request while draining: %d %s", refused.StatusCode, b)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("the in-flight stream was cut: %v\n%s", err, body)
		}
		<-stopped
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
