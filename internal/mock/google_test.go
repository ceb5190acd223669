package mock_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/auth/credentials"
	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/vertex"
	"golang.org/x/oauth2/google"
	"google.golang.org/genai"

	"github.com/oncegate/oncegate/internal/mock"
)

func geminiClient(t *testing.T, url, key string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: url}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var searchTool = []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{Name: "search",
	Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"query": {Type: genai.TypeString}}}}}}}

// checkGemini runs JSON, streamed, max-tokens and tool answers through a
// genai client on either backend.
func checkGemini(t *testing.T, c *genai.Client, model string) {
	t.Helper()
	ctx := context.Background()
	want := mock.AnswerFor(0, question, 30)
	res, err := c.Models.GenerateContent(ctx, model, genai.Text(question), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text() != want || res.Candidates[0].FinishReason != genai.FinishReasonStop || res.UsageMetadata.CandidatesTokenCount != 30 ||
		res.UsageMetadata.CachedContentTokenCount != 2 || res.UsageMetadata.PromptTokenCount == 0 {
		t.Fatalf("json %q finish %q usage %+v", res.Text(), res.Candidates[0].FinishReason, res.UsageMetadata)
	}
	var text string
	var last *genai.GenerateContentResponse
	for r, err := range c.Models.GenerateContentStream(ctx, model, genai.Text(question), nil) {
		if err != nil {
			t.Fatal(err)
		}
		text += r.Text()
		last = r
	}
	if text != want || last.Candidates[0].FinishReason != genai.FinishReasonStop || last.UsageMetadata.CandidatesTokenCount != 30 {
		t.Fatalf("stream %q last %+v", text, last)
	}
	res, err = c.Models.GenerateContent(ctx, model, genai.Text(question), &genai.GenerateContentConfig{MaxOutputTokens: 4})
	if err != nil || res.Candidates[0].FinishReason != genai.FinishReasonMaxTokens || res.Text() != mock.AnswerFor(0, question, 4) {
		t.Fatalf("max tokens %+v %v", res, err)
	}
	cfg := &genai.GenerateContentConfig{Tools: searchTool}
	res, err = c.Models.GenerateContent(ctx, model, genai.Text(question), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fc := res.FunctionCalls(); len(fc) != 1 || fc[0].Name != "search" || fc[0].Args["query"] != "oncegate receipts" {
		t.Fatalf("function call %+v", fc)
	}
	var calls []*genai.FunctionCall
	for r, err := range c.Models.GenerateContentStream(ctx, model, genai.Text(question), cfg) {
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, r.FunctionCalls()...)
	}
	if len(calls) != 1 || calls[0].Name != "search" {
		t.Fatalf("streamed function calls %+v", calls)
	}
}

// TestGeminiSDKAgainstTheMock checks the Gemini API fake with
// google.golang.org/genai.
func TestGeminiSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 2})
	checkGemini(t, geminiClient(t, url, mock.DefaultGeminiAPIKey), "gemini-2.5-flash")
	if got := m.Stats().ByModel["gemini-2.5-flash"].Requests; got != 5 {
		t.Fatalf("requests %d, want 5", got)
	}
}

// TestGeminiStreamWithoutSSE checks that streamGenerateContent without
// alt=sse answers one JSON array, as Google does.
func TestGeminiStreamWithoutSSE(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 4})
	req, _ := http.NewRequest("POST", url+"/v1beta/models/g:streamGenerateContent", strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`))
	req.Header.Set("x-goog-api-key", mock.DefaultGeminiAPIKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var chunks []genai.GenerateContentResponse
	if err := json.NewDecoder(res.Body).Decode(&chunks); err != nil || len(chunks) != 5 || chunks[4].Candidates[0].FinishReason != genai.FinishReasonStop {
		t.Fatalf("array %d chunks: %v", len(chunks), err)
	}
}

func TestGeminiErrorsDecodedBySDK(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 5})
	ctx := context.Background()
	_, err := geminiClient(t, url, "wrong").Models.GenerateContent(ctx, "g", genai.Text(question), nil)
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Status != "INVALID_ARGUMENT" || len(apiErr.Details) == 0 || apiErr.Details[0]["reason"] != "API_KEY_INVALID" {
		t.Fatalf("wrong key: %#v", err)
	}
	c := geminiClient(t, url, mock.DefaultGeminiAPIKey)
	for _, tc := range []struct {
		status int
		want   string
	}{{429, "RESOURCE_EXHAUSTED"}, {503, "UNAVAILABLE"}, {504, "DEADLINE_EXCEEDED"}, {403, "PERMISSION_DENIED"}, {500, "INTERNAL"}} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: tc.status}}}})
		_, err := c.Models.GenerateContent(ctx, "g", genai.Text(question), nil)
		if !errors.As(err, &apiErr) || apiErr.Code != tc.status || apiErr.Status != tc.want {
			t.Fatalf("%d: %#v", tc.status, err)
		}
	}
	// An error inside the stream, after two chunks.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 2}}}})
	var text string
	err = nil
	for r, e := range c.Models.GenerateContentStream(ctx, "g", genai.Text(question), nil) {
		if e != nil {
			err = e
			break
		}
		text += r.Text()
	}
	if !errors.As(err, &apiErr) || apiErr.Status != "UNAVAILABLE" || text != mock.AnswerFor(0, question, 2) {
		t.Fatalf("stream error %q %#v", text, err)
	}
	// A blocked prompt: no candidates, promptFeedback SAFETY.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultContentPolicy}}}})
	res, err := c.Models.GenerateContent(ctx, "g", genai.Text(question), nil)
	if err != nil || len(res.Candidates) != 0 || res.PromptFeedback == nil || res.PromptFeedback.BlockReason != genai.BlockedReasonSafety {
		t.Fatalf("blocked: %+v %v", res, err)
	}
	// A candidate stopped for SAFETY, streamed.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultContentPolicy, ErrorType: "SAFETY"}}}})
	var finish genai.FinishReason
	for r, err := range c.Models.GenerateContentStream(ctx, "g", genai.Text(question), nil) {
		if err != nil {
			t.Fatal(err)
		}
		finish = r.Candidates[0].FinishReason
	}
	if finish != genai.FinishReasonSafety {
		t.Fatalf("finish %q, want SAFETY", finish)
	}
	if got := m.Stats().ByModel["g"].Requests; got != 9 {
		t.Fatalf("requests %d, want 9", got)
	}
}

const vertexProject, vertexRegion = "oncegate-mock", "us-east5"

// TestVertexGeminiSDKAgainstTheMock checks the Vertex fake's Gemini
// models with genai on the Vertex backend, its credentials from the
// service-account JSON through the mock's token endpoint.
func TestVertexGeminiSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 2})
	creds, err := credentials.NewCredentialsFromJSON(credentials.ServiceAccount, mock.ServiceAccountJSON(url),
		&credentials.DetectOptions{Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{Backend: genai.BackendVertexAI, Project: vertexProject, Location: vertexRegion,
		Credentials: creds, HTTPOptions: genai.HTTPOptions{BaseURL: url, APIVersion: "v1"}})
	if err != nil {
		t.Fatal(err)
	}
	checkGemini(t, c, "gemini-2.5-pro")
	if got := m.Stats().ByModel["gemini-2.5-pro"].Requests; got != 5 || m.TokensIssued() != 1 {
		t.Fatalf("requests %d tokens %d", got, m.TokensIssued())
	}
	// An expired token is refused 401 UNAUTHENTICATED.
	m.ExpireTokens()
	_, err = c.Models.GenerateContent(context.Background(), "gemini-2.5-pro", genai.Text(question), nil)
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 401 || apiErr.Status != "UNAUTHENTICATED" {
		t.Fatalf("expired token: %#v", err)
	}
}

func vertexAnthropicClient(t *testing.T, url string, scopes ...string) anthropic.Client {
	t.Helper()
	if len(scopes) == 0 {
		scopes = []string{"https://www.googleapis.com/auth/cloud-platform"}
	}
	creds, err := google.CredentialsFromJSONWithType(context.Background(), mock.ServiceAccountJSON(url), google.ServiceAccount, scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return anthropic.NewClient(vertex.WithCredentials(context.Background(), vertexRegion, vertexProject, creds),
		aopt.WithBaseURL(url), aopt.WithMaxRetries(0))
}

// TestVertexAnthropicSDKAgainstTheMock checks rawPredict and
// streamRawPredict with anthropic-sdk-go's vertex option.
func TestVertexAnthropicSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 3})
	c := vertexAnthropicClient(t, url)
	ctx := context.Background()
	model := "claude-sonnet-4-5@20250929"
	params := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}}
	res, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 30)
	if len(res.Content) != 1 || res.Content[0].Text != want || res.StopReason != "end_turn" || res.Usage.OutputTokens != 30 || res.Usage.CacheReadInputTokens != 3 {
		t.Fatalf("json %+v", res)
	}
	stream := c.Messages.NewStreaming(ctx, params)
	acc := anthropic.Message{}
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != want || acc.StopReason != "end_turn" || acc.Usage.OutputTokens != 30 {
		t.Fatalf("stream %+v", acc)
	}
	params.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "search",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}}}}}
	stream = c.Messages.NewStreaming(ctx, params)
	acc = anthropic.Message{}
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil || len(acc.Content) != 1 || acc.Content[0].Name != "search" || string(acc.Content[0].Input) != `{"query": "oncegate receipts"}` || acc.StopReason != "tool_use" {
		t.Fatalf("tool %+v %v", acc.Content, err)
	}
	if got := m.Stats().ByModel[model].Requests; got != 3 {
		t.Fatalf("requests %d, want 3", got)
	}

	// count_tokens goes to count-tokens:rawPredict with the model in the body.
	count, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(model),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}})
	if err != nil || count.InputTokens <= mock.CountOverhead {
		t.Fatalf("count tokens %+v %v", count, err)
	}

	// Errors: Vertex's own for quota, Anthropic's for the model.
	params.Tools = nil
	var apiErr *anthropic.Error
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 429}}}})
	if _, err := c.Messages.New(ctx, params); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.RawJSON(), "RESOURCE_EXHAUSTED") {
		t.Fatalf("429: %v", err)
	}
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 529}}}})
	if _, err := c.Messages.New(ctx, params); !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || !strings.Contains(apiErr.RawJSON(), "overloaded_error") {
		t.Fatalf("529: %v", err)
	}
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 2}}}})
	stream = c.Messages.NewStreaming(ctx, params)
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("stream error: %v", err)
	}

	// A token without the cloud-platform scope is refused 403.
	m.SetScript(mock.Script{})
	narrow := vertexAnthropicClient(t, url, "https://www.googleapis.com/auth/userinfo.email")
	if _, err := narrow.Messages.New(ctx, params); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || !strings.Contains(apiErr.RawJSON(), "PERMISSION_DENIED") {
		t.Fatalf("narrow scope: %v", err)
	}
}
