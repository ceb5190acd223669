package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/oncegate/oncegate/internal/provider"
)

// These tests hold the package to the official SDK
// (aws-sdk-go-v2/service/bedrockruntime): the SDK, given the same request,
// sends the same JSON to the same path; and it reads this package's
// fixtures as the answers they claim to be. So the codec is faithful to
// Bedrock's wire format, not merely consistent with itself.

// captured is one request the SDK sent.
type captured struct {
	path   string
	body   []byte
	header http.Header
}

// sdkServer answers every request with status and body (content type ct)
// and records what it received.
func sdkServer(t *testing.T, status int, ct string, body []byte) (*bedrockruntime.Client, func() captured) {
	t.Helper()
	var mu sync.Mutex
	var got captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = captured{path: r.URL.EscapedPath(), body: b, header: r.Header.Clone()}
		mu.Unlock()
		w.Header().Set("Content-Type", ct)
		if status != 200 {
			var e struct {
				Type string `json:"__type"`
			}
			_ = json.Unmarshal(body, &e)
			w.Header().Set("X-Amzn-ErrorType", e.Type)
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	c := bedrockruntime.New(bedrockruntime.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.URL),
		RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}, nil
		}),
	})
	return c, func() captured { mu.Lock(); defer mu.Unlock(); return got }
}

func canonicalJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return normalizeNumbers(v)
}

// normalizeNumbers makes 0.5 and 0.50 (float32 and float64 spellings)
// compare equal.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	case json.Number:
		f, _ := x.Float64()
		return float64(float32(f))
	}
	return v
}

const openAIChat = `{"model":"chat","messages":[
 {"role":"system","content":"Be brief."},
 {"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
 {"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"png\"}"}}]},
 {"role":"tool","tool_call_id":"call_1","content":"a PNG header"},
 {"role":"user","content":"Thanks"}],
 "tools":[{"type":"function","function":{"name":"lookup","description":"Look it up","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}],
 "tool_choice":"required","max_tokens":100,"temperature":0.5,"top_p":0.25,"stop":["END"],"user":"u-1"}`

// sdkInput is openAIChat as a Converse request built with the SDK's types.
func sdkInput(model string) *bedrockruntime.ConverseInput {
	text := func(s string) types.ContentBlock { return &types.ContentBlockMemberText{Value: s} }
	return &bedrockruntime.ConverseInput{
		ModelId: aws.String(model),
		System:  []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "Be brief."}},
		Messages: []types.Message{
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
				text("What is in this image?"),
				&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng,
					Source: &types.ImageSourceMemberBytes{Value: []byte("\x89PNG\r\n\x1a\n")}}},
			}},
			{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{
				text("Let me check."),
				&types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String("call_1"), Name: aws.String("lookup"),
					Input: document.NewLazyDocument(map[string]any{"q": "png"})}},
			}},
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
				&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: aws.String("call_1"),
					Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "a PNG header"}}}},
				text("Thanks"),
			}},
		},
		InferenceConfig: &types.InferenceConfiguration{MaxTokens: aws.Int32(100), Temperature: aws.Float32(0.5),
			TopP: aws.Float32(0.25), StopSequences: []string{"END"}},
		ToolConfig: &types.ToolConfiguration{
			Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("lookup"),
				Description: aws.String("Look it up"),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{
					"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}, "required": []any{"q"}})}}}},
			ToolChoice: &types.ToolChoiceMemberAny{Value: types.AnyToolChoice{}},
		},
		RequestMetadata: map[string]string{"user": "u-1"},
	}
}

func TestRequestMatchesSDK(t *testing.T) {
	const model = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-v1:0"
	in, err := provider.ParseRequest(provider.OpenAI, []byte(openAIChat))
	if err != nil {
		t.Fatal(err)
	}
	built, err := BuildRequest(in, provider.Target{Model: model, MaxOutputTokens: 4096}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, got := sdkServer(t, 200, "application/json", mustRead(t, "testdata/converse_tool.json"))
	if _, err := c.Converse(context.Background(), sdkInput(model)); err != nil {
		t.Fatalf("SDK Converse: %v", err)
	}
	sent := got()
	if want, have := canonicalJSON(t, sent.body), canonicalJSON(t, built.Body); !reflect.DeepEqual(want, have) {
		t.Errorf("body differs from the SDK's\n sdk: %s\nours: %s", sent.body, built.Body)
	}
	if p := Path(model, false); p != sent.path {
		t.Errorf("path %q, the SDK sends %q", p, sent.path)
	}
	if !strings.Contains(sent.header.Get("Authorization"), "/us-east-1/bedrock/aws4_request") {
		t.Errorf("the SDK signs for %q; this package signs for service %q", sent.header.Get("Authorization"), SigningName)
	}
}

func TestStreamPathMatchesSDK(t *testing.T) {
	const model = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
	c, got := sdkServer(t, 200, "application/vnd.amazon.eventstream", mustRead(t, "testdata/converse_stream_text.bin"))
	out, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(model),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}}}})
	if err != nil {
		t.Fatalf("SDK ConverseStream: %v", err)
	}
	out.GetStream().Close()
	if p := Path(model, true); p != got().path {
		t.Errorf("path %q, the SDK sends %q", p, got().path)
	}
}

func mustRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
