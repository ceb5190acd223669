package mock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestOpenAIAndAnthropicErrorsDecodedBySDK checks the OpenAI and
// Anthropic fakes' error bodies and in-stream errors with the official
// SDKs, and thinking in an Anthropic stream.
func TestOpenAIAndAnthropicErrorsDecodedBySDK(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 6})
	ctx := context.Background()
	oc, ac := oaClient(url), anClient(url)
	op := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}
	ap := anthropic.MessageNewParams{Model: "m", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}}
	for _, tc := range []struct {
		fault        mock.Fault
		status       int
		oaCode, anTy string
	}{
		{mock.Fault{Type: mock.FaultAuth}, 401, "invalid_api_key", "authentication_error"},
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "2"}, 429, "rate_limit_exceeded", "rate_limit_error"},
		{mock.Fault{Type: mock.FaultStatus, Status: 529}, 529, "", "overloaded_error"},
		{mock.Fault{Type: mock.FaultContextLength}, 400, "context_length_exceeded", "invalid_request_error"},
		{mock.Fault{Type: mock.FaultQuota}, 429, "insufficient_quota", "insufficient_quota"},
	} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: tc.fault}}})
		_, err := oc.Chat.Completions.New(ctx, op)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != tc.status || oe.Code != tc.oaCode {
			t.Fatalf("openai %+v: %v", tc.fault, err)
		}
		_, err = ac.Messages.New(ctx, ap)
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != tc.status || !strings.Contains(ae.RawJSON(), `"type":"`+tc.anTy+`"`) {
			t.Fatalf("anthropic %+v: %v", tc.fault, err)
		}
		if tc.status == 429 && tc.fault.RetryAfter != "" && ae.Response.Header.Get("Retry-After") != "2" {
			t.Fatalf("Retry-After %v", ae.Response.Header)
		}
	}

	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 2}}}})
	os := oc.Chat.Completions.NewStreaming(ctx, op)
	for os.Next() {
	}
	if err := os.Err(); err == nil || !strings.Contains(err.Error(), "Overloaded") {
		t.Fatalf("openai stream error: %v", err)
	}
	as := ac.Messages.NewStreaming(ctx, ap)
	for as.Next() {
	}
	if err := as.Err(); err == nil || !strings.Contains(err.Error(), "overloaded_error") {
		t.Fatalf("anthropic stream error: %v", err)
	}

	// Thinking streams a thinking block, signed, before the text.
	m.SetScript(mock.Script{})
	ap.Thinking = anthropic.ThinkingConfigParamOfEnabled(1024)
	as = ac.Messages.NewStreaming(ctx, ap)
	acc := anthropic.Message{}
	for as.Next() {
		if err := acc.Accumulate(as.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := as.Err(); err != nil || len(acc.Content) != 2 || acc.Content[0].Thinking != mock.ThinkingText() ||
		acc.Content[0].Signature == "" || acc.Content[1].Text != mock.AnswerFor(0, question, 6) {
		t.Fatalf("thinking %+v %v", acc.Content, err)
	}
}
