package mock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	oopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/oncegate/oncegate/internal/mock"
)

func azureClient(url, key string, opts ...oopt.RequestOption) openai.Client {
	return openai.NewClient(append([]oopt.RequestOption{azure.WithEndpoint(url, "2024-10-21"), azure.WithAPIKey(key),
		azure.WithUnsafeAllowHTTP(), oopt.WithMaxRetries(0)}, opts...)...)
}

// TestAzureSDKAgainstTheMock checks the Azure OpenAI fake with openai-go's
// azure option: JSON and streamed answers, usage, tools, embeddings on a
// deployment, and each error shape decoded by the SDK.
func TestAzureSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 4})
	c := azureClient(url, mock.DefaultAzureAPIKey)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-deploy", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 30)
	if res.Choices[0].Message.Content != want || res.Choices[0].FinishReason != "stop" || res.Usage.CompletionTokens != 30 ||
		res.Usage.PromptTokensDetails.CachedTokens != 4 || res.Model != "gpt-4o-deploy" {
		t.Fatalf("json answer %q finish %q usage %+v", res.Choices[0].Message.Content, res.Choices[0].FinishReason, res.Usage)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatal("the SDK accumulator rejected a chunk")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != want || acc.Usage.CompletionTokens != 30 || acc.Usage.PromptTokens != res.Usage.PromptTokens {
		t.Fatalf("stream answer %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "search", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}})}
	stream = c.Chat.Completions.NewStreaming(ctx, params)
	acc = openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	tc := acc.Choices[0].Message.ToolCalls
	if len(tc) != 1 || tc[0].Function.Name != "search" || tc[0].Function.Arguments != `{"query": "oncegate receipts"}` || acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool call %+v finish %q", tc, acc.Choices[0].FinishReason)
	}

	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed-deploy", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings %+v %v", emb, err)
	}
	if s := m.Stats(); s.Requests != 4 || s.ByModel["gpt-4o-deploy"].Requests != 3 || s.ByModel["embed-deploy"].Requests != 1 {
		t.Fatalf("stats %+v", s)
	}

	// The v1 API: the model in the body names the deployment.
	v1 := openai.NewClient(oopt.WithBaseURL(url+"/openai/v1/"), oopt.WithHeader("api-key", mock.DefaultAzureAPIKey), oopt.WithMaxRetries(0))
	res, err = v1.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "v1-deploy", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}})
	if err != nil || res.Choices[0].Message.Content != want {
		t.Fatalf("v1 API: %+v %v", res, err)
	}
}

func TestAzureErrorsDecodedBySDK(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 5})
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "d", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}

	wrong := azureClient(url, "wrong-key")
	_, err := wrong.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "401" || apiErr.Message == "" {
		t.Fatalf("wrong key: %v", err)
	}

	c := azureClient(url, mock.DefaultAzureAPIKey)
	for _, tc := range []struct {
		fault  mock.Fault
		status int
		code   string
	}{
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "3", RetryAfterMS: "2500"}, 429, "429"},
		{mock.Fault{Type: mock.FaultStatus, Status: 503}, 503, "ServiceUnavailable"},
		{mock.Fault{Type: mock.FaultAuth}, 401, "401"},
		{mock.Fault{Type: mock.FaultContentPolicy}, 400, "content_filter"},
	} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: tc.fault}}})
		_, err := c.Chat.Completions.New(ctx, params)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.code {
			t.Fatalf("%+v: %v", tc.fault, err)
		}
		if tc.status == 429 && (apiErr.Response.Header.Get("retry-after-ms") != "2500" || apiErr.Response.Header.Get("retry-after") != "3") {
			t.Fatalf("429 headers %v", apiErr.Response.Header)
		}
	}
	if got := m.Stats().ByModel["d"].Requests; got != 5 {
		t.Fatalf("requests %d, want 5 (a refused key counts)", got)
	}
}
