package mock_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"cloud.google.com/go/auth/credentials"
	"github.com/anthropics/anthropic-sdk-go/v2"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	smithy "github.com/aws/smithy-go"
	"github.com/openai/openai-go/v3"
	"google.golang.org/genai"

	"github.com/oncegate/oncegate/internal/mock"
)

// vertexGenai is genai on the Vertex backend, its credentials from the
// mock's service account.
func vertexGenai(t *testing.T, url string) *genai.Client {
	t.Helper()
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
	return c
}

// TestAMissingModelInEachProvidersShape: the model_not_found fault is each
// provider's own answer for a model or deployment it does not have, as
// its official SDK reads it — and only for the model the rule names.
func TestAMissingModelInEachProvidersShape(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 3})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gone", Fault: mock.Fault{Type: mock.FaultModelNotFound}}}})
	ctx := context.Background()
	oc, ac, az, vac := oaClient(url), anClient(url), azureClient(url, mock.DefaultAzureAPIKey), vertexAnthropicClient(t, url)
	oaParams := func(model string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}
	}

	var oe *openai.Error
	if _, err := oc.Chat.Completions.New(ctx, oaParams("gone")); !errors.As(err, &oe) || oe.StatusCode != 404 ||
		oe.Code != "model_not_found" || oe.Type != "invalid_request_error" || !strings.Contains(oe.Message, "The model `gone` does not exist") {
		t.Fatalf("openai: %v", err)
	}
	if _, err := oc.Chat.Completions.New(ctx, oaParams("here")); err != nil {
		t.Fatalf("openai, another model: %v", err)
	}
	if _, err := az.Chat.Completions.New(ctx, oaParams("gone")); !errors.As(err, &oe) ||
		oe.StatusCode != 404 || oe.Code != "DeploymentNotFound" || !strings.HasPrefix(oe.Message, "The API deployment for this resource does not exist.") {
		t.Fatalf("azure: %v", err)
	}

	var ae *anthropic.Error
	ap := anthropic.MessageNewParams{Model: "gone", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}}
	if _, err := ac.Messages.New(ctx, ap); !errors.As(err, &ae) || ae.StatusCode != 404 ||
		!strings.Contains(ae.RawJSON(), `"type":"not_found_error"`) || !strings.Contains(ae.RawJSON(), `"message":"model: gone"`) {
		t.Fatalf("anthropic: %v", err)
	}
	if _, err := vac.Messages.New(ctx, ap); !errors.As(err, &ae) || ae.StatusCode != 404 ||
		!strings.Contains(ae.RawJSON(), `"NOT_FOUND"`) || !strings.Contains(ae.RawJSON(), "publishers/anthropic/models/gone` was not found") {
		t.Fatalf("vertex anthropic: %v", err)
	}

	var apiErr smithy.APIError
	var re *awshttp.ResponseError
	if _, err := bedrockClient(url, mock.DefaultAWS.SecretAccessKey).Converse(ctx, converseInput("gone")); !errors.As(err, &apiErr) ||
		apiErr.ErrorCode() != "ValidationException" || apiErr.ErrorMessage() != "The provided model identifier is invalid." ||
		!errors.As(err, &re) || re.HTTPStatusCode() != 400 {
		t.Fatalf("bedrock: %v", err)
	}

	var ge genai.APIError
	if _, err := geminiClient(t, url, mock.DefaultGeminiAPIKey).Models.GenerateContent(ctx, "gone", genai.Text(question), nil); !errors.As(err, &ge) ||
		ge.Code != 404 || ge.Status != "NOT_FOUND" || !strings.HasPrefix(ge.Message, "models/gone is not found for API version v1beta") {
		t.Fatalf("gemini: %#v", err)
	}
	if _, err := vertexGenai(t, url).Models.GenerateContent(ctx, "gone", genai.Text(question), nil); !errors.As(err, &ge) ||
		ge.Code != 404 || ge.Status != "NOT_FOUND" ||
		!strings.Contains(ge.Message, "Publisher Model `projects/"+vertexProject+"/locations/"+vertexRegion+"/publishers/google/models/gone` was not found") {
		t.Fatalf("vertex gemini: %#v", err)
	}
	if got := m.Stats().ByModel["gone"].Requests; got != 7 {
		t.Fatalf("requests for the missing model %d, want 7 (every refusal counts)", got)
	}
}

// TestModelLookups: the model lookups `oncegate check --connect` asks
// answer each SDK's Models.Get, and 404 in the provider's shape for a
// model a model_not_found rule names.
func TestModelLookups(t *testing.T) {
	m, url := start(t, mock.Config{})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gone", Fault: mock.Fault{Type: mock.FaultModelNotFound}}}})
	ctx := context.Background()
	oc, ac := oaClient(url), anClient(url)
	if got, err := oc.Models.Get(ctx, "here"); err != nil || got.ID != "here" {
		t.Fatalf("openai here: %+v %v", got, err)
	}
	var oe *openai.Error
	if _, err := oc.Models.Get(ctx, "gone"); !errors.As(err, &oe) || oe.StatusCode != 404 || oe.Code != "model_not_found" {
		t.Fatalf("openai gone: %v", err)
	}
	if got, err := ac.Models.Get(ctx, "here", anthropic.ModelGetParams{}); err != nil || got.ID != "here" || got.Type != "model" {
		t.Fatalf("anthropic here: %+v %v", got, err)
	}
	var ae *anthropic.Error
	if _, err := ac.Models.Get(ctx, "gone", anthropic.ModelGetParams{}); !errors.As(err, &ae) || ae.StatusCode != 404 ||
		!strings.Contains(ae.RawJSON(), "not_found_error") {
		t.Fatalf("anthropic gone: %v", err)
	}
	gc := geminiClient(t, url, mock.DefaultGeminiAPIKey)
	if got, err := gc.Models.Get(ctx, "here", nil); err != nil || got.Name != "models/here" {
		t.Fatalf("gemini here: %+v %v", got, err)
	}
	var ge genai.APIError
	if _, err := gc.Models.Get(ctx, "gone", nil); !errors.As(err, &ge) || ge.Code != 404 || ge.Status != "NOT_FOUND" {
		t.Fatalf("gemini gone: %#v", err)
	}
	if _, err := geminiClient(t, url, "wrong").Models.Get(ctx, "here", nil); !errors.As(err, &ge) || ge.Code != 400 {
		t.Fatalf("gemini wrong key: %#v", err)
	}
	if n := m.ModelLookups(); n != 7 {
		t.Fatalf("lookups %d, want 7", n)
	}
	if n := m.Stats().Requests; n != 0 {
		t.Fatalf("lookups counted as %d generation requests", n)
	}
}

// TestVertexPublisherModelLookup: GET /v1/publishers/{publisher}/models/{model}
// with a token from the mock's token endpoint.
func TestVertexPublisherModelLookup(t *testing.T) {
	m, url := start(t, mock.Config{})
	m.SetScript(mock.Script{Rules: []mock.Rule{{Model: "gone", Fault: mock.Fault{Type: mock.FaultModelNotFound}}}})
	creds, err := credentials.NewCredentialsFromJSON(credentials.ServiceAccount, mock.ServiceAccountJSON(url),
		&credentials.DetectOptions{Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := creds.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int{"gemini-2.5-pro": 200, "gone": 404, "gone@20250101": 404, "claude@20250929": 200} {
		req, _ := http.NewRequest("GET", url+"/v1/publishers/google/models/"+model, nil)
		req.Header.Set("Authorization", "Bearer "+tok.Value)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s: %d, want %d", model, res.StatusCode, want)
		}
	}
	res, err := http.Get(url + "/v1/publishers/google/models/gemini-2.5-pro")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Fatalf("no token: %d", res.StatusCode)
	}
}

// TestBedrockFramesThatFailTheirCRC: a frame whose message CRC or prelude
// CRC is wrong, after some text — the official SDK stops the stream with
// an error there; and an intact frame whose JSON does not parse
// (malformed_after) is no valid event either.
func TestBedrockFramesThatFailTheirCRC(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 6})
	c := bedrockClient(url, mock.DefaultAWS.SecretAccessKey)
	for _, f := range []mock.Fault{
		{Type: mock.FaultBadCRCAfter, After: 2},
		{Type: mock.FaultBadCRCAfter, After: 2, ErrorType: "prelude"},
		{Type: mock.FaultMalformedAfter, After: 2},
	} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: f}}})
		out, err := c.ConverseStream(context.Background(), streamInput(converseInput("m")))
		if err != nil {
			t.Fatal(err)
		}
		text, _, _, _, _, err := readStream(t, out)
		if err == nil || text != mock.AnswerFor(0, question, 2) {
			t.Fatalf("%+v: text %q, err %v", f, text, err)
		}
	}
	// On a protocol without checksums the fault changes nothing.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultBadCRCAfter, After: 2}}}})
	oc := oaClient(url)
	st := oc.Chat.Completions.NewStreaming(context.Background(),
		openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}})
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil || acc.Choices[0].Message.Content != mock.AnswerFor(0, question, 6) {
		t.Fatalf("openai stream: %q %v", acc.Choices[0].Message.Content, err)
	}
}

// TestGoogleRetryInfo: a Gemini 429 names its wait in a RetryInfo detail
// (retry_delay as given, else retry_after seconds, else 1s) and sends no
// Retry-After header, as Google does.
func TestGoogleRetryInfo(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 3})
	c := geminiClient(t, url, mock.DefaultGeminiAPIKey)
	for _, tc := range []struct {
		fault mock.Fault
		want  string
	}{
		{mock.Fault{Type: mock.FaultStatus, Status: 429}, "1s"},
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "3"}, "3s"},
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryDelay: "20.5s"}, "20.5s"},
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryDelay: "soon"}, "soon"},
	} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: tc.fault}}})
		_, err := c.Models.GenerateContent(context.Background(), "g", genai.Text(question), nil)
		var ge genai.APIError
		if !errors.As(err, &ge) || ge.Code != 429 || ge.Status != "RESOURCE_EXHAUSTED" {
			t.Fatalf("%+v: %#v", tc.fault, err)
		}
		var delay any
		for _, d := range ge.Details {
			if d["@type"] == "type.googleapis.com/google.rpc.RetryInfo" {
				delay = d["retryDelay"]
			}
		}
		if delay != tc.want {
			t.Fatalf("%+v: retryDelay %v, want %q (details %v)", tc.fault, delay, tc.want, ge.Details)
		}
	}
	req, _ := http.NewRequest("POST", url+"/v1beta/models/g:generateContent", strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`))
	req.Header.Set("x-goog-api-key", mock.DefaultGeminiAPIKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "" {
		t.Fatalf("%d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
}
