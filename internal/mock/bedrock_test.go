package mock_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithy "github.com/aws/smithy-go"

	"github.com/oncegate/oncegate/internal/mock"
)

func bedrockClient(url, secret string) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:       mock.DefaultAWS.Region,
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider(mock.DefaultAWS.AccessKeyID, secret, ""),
		Retryer:      aws.NopRetryer{},
	})
}

func converseInput(model string) *bedrockruntime.ConverseInput {
	return &bedrockruntime.ConverseInput{ModelId: aws.String(model),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: question}}}}}
}

func streamInput(in *bedrockruntime.ConverseInput) *bedrockruntime.ConverseStreamInput {
	return &bedrockruntime.ConverseStreamInput{ModelId: in.ModelId, Messages: in.Messages, ToolConfig: in.ToolConfig, InferenceConfig: in.InferenceConfig}
}

// streamed sends one ConverseStream and drains it. The AWS SDK's event
// stream reader sometimes closes the connection under its own last read
// as a stream ends: the final frames arrived, and Err says "use of closed
// network connection" (net.ErrClosed) — about once in 150 runs, whatever
// the mock wrote, and never with a cancelled context. That one error is
// the SDK's, not the wire format's: the stream is sent again, at most
// twice, and *retried counts it for the mock's request count.
func streamed(t *testing.T, c *bedrockruntime.Client, in *bedrockruntime.ConverseInput, retried *int) (text, toolName, toolInput string,
	stop types.StopReason, usage *types.TokenUsage, err error) {
	t.Helper()
	for try := 0; ; try++ {
		out, err := c.ConverseStream(context.Background(), streamInput(in))
		if err != nil {
			t.Fatal(err)
		}
		text, toolName, toolInput, stop, usage, err = readStream(t, out)
		if !errors.Is(err, net.ErrClosed) || try == 2 {
			return text, toolName, toolInput, stop, usage, err
		}
		t.Logf("the SDK closed its own connection at the stream's end (%v); sending it again", err)
		*retried++
	}
}

// readStream drains a ConverseStream: its text, tool call, stop reason and usage.
func readStream(t *testing.T, out *bedrockruntime.ConverseStreamOutput) (text, toolName, toolInput string, stop types.StopReason, usage *types.TokenUsage, err error) {
	t.Helper()
	s := out.GetStream()
	defer s.Close()
	for ev := range s.Events() {
		switch e := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				toolName = aws.ToString(tu.Value.Name)
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			switch d := e.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				text += d.Value
			case *types.ContentBlockDeltaMemberToolUse:
				toolInput += aws.ToString(d.Value.Input)
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			stop = e.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			usage = e.Value.Usage
		}
	}
	return text, toolName, toolInput, stop, usage, s.Err()
}

// TestBedrockSDKAgainstTheMock checks the Bedrock fake with the AWS SDK's
// bedrockruntime client: SigV4 accepted, Converse and ConverseStream
// (event-stream framing), usage, tool use.
func TestBedrockSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 3})
	c := bedrockClient(url, mock.DefaultAWS.SecretAccessKey)
	ctx := context.Background()
	model := "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"
	in := converseInput(model)
	res, err := c.Converse(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 30)
	msg := res.Output.(*types.ConverseOutputMemberMessage).Value
	if got := msg.Content[0].(*types.ContentBlockMemberText).Value; got != want || res.StopReason != types.StopReasonEndTurn ||
		aws.ToInt32(res.Usage.OutputTokens) != 30 || aws.ToInt32(res.Usage.CacheReadInputTokens) != 3 {
		t.Fatalf("converse %q stop %q usage %+v", got, res.StopReason, res.Usage)
	}

	retried := 0
	text, _, _, stop, usage, err := streamed(t, c, in, &retried)
	if err != nil || text != want || stop != types.StopReasonEndTurn || usage == nil || aws.ToInt32(usage.OutputTokens) != 30 {
		t.Fatalf("stream %q stop %q usage %+v err %v", text, stop, usage, err)
	}

	in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(5)}
	res, err = c.Converse(ctx, in)
	if err != nil || res.StopReason != types.StopReasonMaxTokens {
		t.Fatalf("max tokens: %+v %v", res, err)
	}

	in.InferenceConfig = nil
	in.ToolConfig = &types.ToolConfiguration{Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
		Name: aws.String("search"), InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object"})}}}}}
	_, name, input, stop, _, err := streamed(t, c, in, &retried)
	if err != nil || name != "search" || input != `{"query": "oncegate receipts"}` || stop != types.StopReasonToolUse {
		t.Fatalf("tool %q %q stop %q err %v", name, input, stop, err)
	}
	res, err = c.Converse(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	tu, ok := res.Output.(*types.ConverseOutputMemberMessage).Value.Content[0].(*types.ContentBlockMemberToolUse)
	if !ok || aws.ToString(tu.Value.Name) != "search" || res.StopReason != types.StopReasonToolUse {
		t.Fatalf("json tool use %+v", res.Output)
	}
	if got := m.Stats().ByModel[model].Requests; got != int64(5+retried) {
		t.Fatalf("requests %d, want %d (5, and %d streams tried again)", got, 5+retried, retried)
	}
}

func TestBedrockSigV4AndErrors(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 5})
	ctx := context.Background()
	in := converseInput("m")

	wrong := bedrockClient(url, "not-the-secret")
	_, err := wrong.Converse(ctx, in)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" {
		t.Fatalf("wrong secret: %v", err)
	}
	unknown := bedrockruntime.New(bedrockruntime.Options{Region: mock.DefaultAWS.Region, BaseEndpoint: aws.String(url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDUNKNOWN", mock.DefaultAWS.SecretAccessKey, "")})
	if _, err = unknown.Converse(ctx, in); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "UnrecognizedClientException" {
		t.Fatalf("unknown key: %v", err)
	}
	otherRegion := bedrockruntime.New(bedrockruntime.Options{Region: "eu-west-1", BaseEndpoint: aws.String(url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey, "")})
	if _, err = otherRegion.Converse(ctx, in); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" {
		t.Fatalf("wrong region: %v", err)
	}

	c := bedrockClient(url, mock.DefaultAWS.SecretAccessKey)
	for _, tc := range []struct {
		fault mock.Fault
		check func(error) bool
	}{
		{mock.Fault{Type: mock.FaultStatus, Status: 429}, func(err error) bool { var e *types.ThrottlingException; return errors.As(err, &e) }},
		{mock.Fault{Type: mock.FaultStatus, Status: 503}, func(err error) bool { var e *types.ServiceUnavailableException; return errors.As(err, &e) }},
		{mock.Fault{Type: mock.FaultStatus, Status: 408}, func(err error) bool { var e *types.ModelTimeoutException; return errors.As(err, &e) }},
		{mock.Fault{Type: mock.FaultStatus, Status: 429, ErrorType: "ModelNotReadyException"}, func(err error) bool { var e *types.ModelNotReadyException; return errors.As(err, &e) }},
		{mock.Fault{Type: mock.FaultStatus, Status: 400}, func(err error) bool { var e *types.ValidationException; return errors.As(err, &e) }},
		{mock.Fault{Type: mock.FaultAuth, ErrorType: "ExpiredTokenException"}, func(err error) bool {
			return errors.As(err, &apiErr) && apiErr.ErrorCode() == "ExpiredTokenException"
		}},
	} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: tc.fault}}})
		if _, err := c.Converse(ctx, in); !tc.check(err) {
			t.Fatalf("%+v: %T %v", tc.fault, err, err)
		}
	}

	// In-stream exceptions, after two tokens.
	for _, typ := range []string{"throttlingException", "modelStreamErrorException"} {
		m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 2, ErrorType: typ}}}})
		out, err := c.ConverseStream(ctx, streamInput(in))
		if err != nil {
			t.Fatal(err)
		}
		text, _, _, _, _, err := readStream(t, out)
		var th *types.ThrottlingException
		var ms *types.ModelStreamErrorException
		if text != mock.AnswerFor(0, question, 2) || !(errors.As(err, &th) || errors.As(err, &ms)) {
			t.Fatalf("%s: text %q err %T %v", typ, text, err, err)
		}
	}
	// A guardrail that intervened: 200, no content, its stop reason.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultContentPolicy, ErrorType: "guardrail_intervened"}}}})
	gout, err := c.ConverseStream(ctx, streamInput(in))
	if err != nil {
		t.Fatal(err)
	}
	if text, _, _, stop, _, err := readStream(t, gout); err != nil || text != "" || stop != types.StopReasonGuardrailIntervened {
		t.Fatalf("guardrail: %q %q %v", text, stop, err)
	}
	// A frame with a bad checksum is malformed.
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultMalformedAfter, After: 1}}}})
	out, err := c.ConverseStream(ctx, streamInput(in))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, _, err := readStream(t, out); err == nil {
		t.Fatal("a corrupt frame was read without error")
	}
	if got := m.Stats().ByModel["m"].Requests; got != 13 {
		t.Fatalf("requests %d, want 13 (refused signatures count)", got)
	}
}

// TestBedrockSessionToken checks temporary credentials: the SDK's
// X-Amz-Security-Token is signed and required when the mock has one.
func TestBedrockSessionToken(t *testing.T) {
	creds := mock.DefaultAWS
	creds.SessionToken = "mock-session-token"
	_, url := start(t, mock.Config{Tokens: 3, AWS: creds})
	ctx := context.Background()
	with := bedrockruntime.New(bedrockruntime.Options{Region: creds.Region, BaseEndpoint: aws.String(url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)})
	if _, err := with.Converse(ctx, converseInput("m")); err != nil {
		t.Fatal(err)
	}
	without := bedrockClient(url, creds.SecretAccessKey)
	var apiErr smithy.APIError
	if _, err := without.Converse(ctx, converseInput("m")); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "UnrecognizedClientException" {
		t.Fatalf("no session token: %v", err)
	}
}
