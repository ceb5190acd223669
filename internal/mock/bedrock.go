package mock

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The Bedrock fake (docs.aws.amazon.com/bedrock/latest/APIReference):
// Converse and ConverseStream, the stream in AWS's binary event-stream
// framing, every request's SigV4 signature recomputed and checked, and
// errors as the x-amzn-ErrorType header with a {"message"} body.

// AWSCredentials are the credentials and region the Bedrock fake checks
// signatures with.
type AWSCredentials struct {
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken, when set, must come as X-Amz-Security-Token.
	SessionToken string
	Region       string
}

// DefaultAWS are the Bedrock fake's credentials unless Config.AWS sets an
// access key.
var DefaultAWS = AWSCredentials{AccessKeyID: "AKIDMOCKONCEGATE", SecretAccessKey: "mock-secret-access-key", Region: "us-east-1"}

// bedrockService is the service name Bedrock runtime requests are signed for.
const bedrockService = "bedrock"

// cvRequest is the part of a Converse request the mock reads.
type cvRequest struct {
	Messages []struct {
		Role    string    `json:"role"`
		Content []cvBlock `json:"content"`
	} `json:"messages"`
	System          []cvBlock `json:"system"`
	InferenceConfig *struct {
		MaxTokens int64 `json:"maxTokens"`
	} `json:"inferenceConfig"`
	ToolConfig *struct {
		Tools []struct {
			ToolSpec *struct {
				Name string `json:"name"`
			} `json:"toolSpec"`
		} `json:"tools"`
		ToolChoice *struct {
			Any  json.RawMessage `json:"any"`
			Tool *struct {
				Name string `json:"name"`
			} `json:"tool"`
		} `json:"toolChoice"`
	} `json:"toolConfig"`
}

type cvBlock struct {
	Text    string `json:"text"`
	ToolUse *struct {
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"toolUse"`
	ToolResult *struct {
		Content []struct {
			Text string          `json:"text"`
			JSON json.RawMessage `json:"json"`
		} `json:"content"`
	} `json:"toolResult"`
}

func decodeConverse(body []byte, model string, stream bool) (*ask, error) {
	var in cvRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, refusal("Malformed input request, please reformat your input and try again.")
	}
	if len(in.Messages) == 0 {
		return nil, refusal("A conversation must start with a user message. Try again with a conversation that starts with a user message.")
	}
	a := &ask{model: model, stream: stream}
	var sys []string
	for _, b := range in.System {
		if b.Text != "" {
			sys = append(sys, b.Text)
		}
	}
	a.system = strings.Join(sys, "\n\n")
	n := textTokens(a.system)
	for _, m := range in.Messages {
		t := turn{role: m.Role}
		for _, b := range m.Content {
			t.text += b.Text
			if b.ToolUse != nil {
				t.hasCalls = true
				t.calls += b.ToolUse.Name + string(b.ToolUse.Input)
			}
			if b.ToolResult != nil {
				for _, c := range b.ToolResult.Content {
					t.text += c.Text + string(c.JSON)
				}
			}
		}
		n += perMessage + textTokens(t.text+t.calls)
		a.turns = append(a.turns, t)
	}
	a.promptTokens = n
	if ic := in.InferenceConfig; ic != nil {
		a.maxTokens = ic.MaxTokens
	}
	if tc := in.ToolConfig; tc != nil {
		for _, t := range tc.Tools {
			if t.ToolSpec != nil {
				a.tools = append(a.tools, t.ToolSpec.Name)
			}
		}
		if ch := tc.ToolChoice; ch != nil {
			switch {
			case ch.Tool != nil:
				a.toolMode, a.toolName = "tool", ch.Tool.Name
			case len(ch.Any) > 0:
				a.toolMode = "required"
			}
		}
	}
	return a, nil
}

// serveBedrock answers POST /model/{modelId}/converse and /converse-stream.
func (m *Mock) serveBedrock(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	stream := strings.HasSuffix(r.URL.Path, "/converse-stream")
	a, err := decodeConverse(body, r.PathValue("model"), stream)
	if err != nil {
		bedrockError(w, 400, "ValidationException", err.Error())
		return
	}
	creds := m.cfg.AWS
	if creds.AccessKeyID == "" {
		creds = DefaultAWS
	}
	if creds.Region == "" {
		creds.Region = DefaultAWS.Region
	}
	x := m.begin(bedrockCodec{creds: creds}, w, r, a)
	x.body = body
	x.finishServe()
}

// bedrockError writes an AWS JSON error: the type in x-amzn-ErrorType,
// the message in the body.
func bedrockError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("x-amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("x-amzn-RequestId", "00000000-0000-4000-8000-000000000000")
	writeJSON(w, status, map[string]string{"message": msg})
}

// bedrockCodec answers as Bedrock's Converse API.
type bedrockCodec struct{ creds AWSCredentials }

func (bedrockCodec) toolPrefix() string { return "tooluse_mock" }

// authenticate recomputes the request's SigV4 signature with the
// configured secret, over the headers the request says it signed.
func (b bedrockCodec) authenticate(x *exchange, body []byte) bool {
	const invalidToken = "The security token included in the request is invalid."
	r := x.r
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		bedrockError(x.w, 403, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return false
	}
	fields := map[string]string{}
	for _, f := range strings.Split(auth, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		bedrockError(x.w, 403, "IncompleteSignatureException", "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters.")
		return false
	}
	if scope[0] != b.creds.AccessKeyID {
		bedrockError(x.w, 403, "UnrecognizedClientException", invalidToken)
		return false
	}
	if b.creds.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != b.creds.SessionToken {
		bedrockError(x.w, 403, "UnrecognizedClientException", invalidToken)
		return false
	}
	if scope[2] != b.creds.Region {
		bedrockError(x.w, 403, "InvalidSignatureException", "Credential should be scoped to a valid region. ")
		return false
	}
	if scope[3] != bedrockService {
		bedrockError(x.w, 403, "InvalidSignatureException", "Credential should be scoped to correct service: '"+bedrockService+"'. ")
		return false
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		bedrockError(x.w, 403, "IncompleteSignatureException", "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
		return false
	}
	if d := time.Since(at); d > 5*time.Minute || d < -5*time.Minute {
		bedrockError(x.w, 403, "InvalidSignatureException", "Signature expired: "+r.Header.Get("X-Amz-Date")+" is now earlier than "+
			time.Now().UTC().Add(-5*time.Minute).Format("20060102T150405Z")+" ("+time.Now().UTC().Format("20060102T150405Z")+" - 5 min.)")
		return false
	}
	re, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	if err != nil {
		bedrockError(x.w, 400, "ValidationException", "bad request URI")
		return false
	}
	re.Host = r.Host
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host":
		case "content-length":
			re.ContentLength = r.ContentLength
		default:
			re.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: b.creds.AccessKeyID, SecretAccessKey: b.creds.SecretAccessKey, SessionToken: b.creds.SessionToken}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, re, hex.EncodeToString(sum[:]), bedrockService, b.creds.Region, at); err != nil {
		bedrockError(x.w, 500, "InternalServerException", "signing failed")
		return false
	}
	_, want, _ := strings.Cut(re.Header.Get("Authorization"), "Signature=")
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		bedrockError(x.w, 403, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")
		return false
	}
	return true
}

// bedrockFault is the status, exception and message of a fault.
func bedrockFault(f *Fault) (int, string, string) {
	status, typ, msg := orInt(f.Status, 500), f.ErrorType, f.Message
	switch f.Type {
	case FaultAuth:
		status, typ = 403, orDefault(typ, "UnrecognizedClientException")
	case FaultContextLength:
		status, typ, msg = 400, "ValidationException", orDefault(msg, "Input is too long for requested model.")
	case FaultContentPolicy:
		status, typ, msg = 400, "ValidationException", orDefault(msg, "This request has been blocked by our content filters.")
	case FaultQuota:
		status, typ, msg = 429, "ServiceQuotaExceededException", orDefault(msg, "Your request exceeds the service quota for your account. You can view your quotas at https://console.aws.amazon.com/servicequotas. You can resubmit your request later.")
	case FaultModelNotFound:
		// Converse on a model id Bedrock does not know.
		status, typ, msg = 400, "ValidationException", orDefault(msg, "The provided model identifier is invalid.")
	}
	if typ == "" {
		switch status {
		case 400:
			typ = "ValidationException"
		case 403:
			typ = "AccessDeniedException"
		case 404:
			typ = "ResourceNotFoundException"
		case 408:
			typ = "ModelTimeoutException"
		case 424:
			typ = "ModelErrorException"
		case 429:
			typ = "ThrottlingException"
		case 503:
			typ = "ServiceUnavailableException"
		default:
			typ = "InternalServerException"
		}
	}
	if msg == "" {
		msg = map[string]string{
			"ThrottlingException":            "Too many requests, please wait before trying again.",
			"ServiceUnavailableException":    "Bedrock is unable to process your request.",
			"ModelNotReadyException":         "Model is not ready for inference. Wait and try your request again.",
			"ModelTimeoutException":          "Model has timed out in processing the request. Try your request again.",
			"AccessDeniedException":          "You don't have access to the model with the specified model ID.",
			"UnrecognizedClientException":    "The security token included in the request is invalid.",
			"InvalidSignatureException":      "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.",
			"ExpiredTokenException":          "The security token included in the request is expired",
			"ValidationException":            "Malformed input request, please reformat your input and try again.",
			"ResourceNotFoundException":      "Could not resolve the foundation model from the provided model identifier.",
			"InternalServerException":        "The server encountered an error processing your request.",
			"ModelErrorException":            "The system encountered an unexpected error during processing. Try your request again.",
			"modelStreamErrorException":      "The model stream encountered an error.",
			"ServiceQuotaExceededException":  "Your request exceeds the service quota for your account.",
			"ModelStreamErrorException":      "The model stream encountered an error.",
			"serviceUnavailableException":    "Bedrock is unable to process your request.",
			"throttlingException":            "Too many requests, please wait before trying again.",
			"internalServerException":        "The server encountered an error processing your request.",
			"validationException":            "Malformed input request, please reformat your input and try again.",
			"ConflictException":              "The request could not be completed due to a conflict.",
			"TooManyRequestsException":       "Too many requests, please wait before trying again.",
			"RequestEntityTooLargeException": "Request entity too large.",
		}[typ]
		msg = orDefault(msg, http.StatusText(status))
	}
	return status, typ, msg
}

func (b bedrockCodec) fail(x *exchange, f *Fault) {
	retryHeaders(x.w.Header(), f)
	if f.Type == FaultContentPolicy && (f.ErrorType == "guardrail_intervened" || f.ErrorType == "content_filtered") {
		b.stopped(x, f.ErrorType)
		return
	}
	status, typ, msg := bedrockFault(f)
	bedrockError(x.w, status, typ, msg)
}

// cvStop names a finish reason as Bedrock does.
func cvStop(finish string) string {
	switch finish {
	case finishLength:
		return "max_tokens"
	case finishTools:
		return "tool_use"
	}
	return "end_turn"
}

func cvUsage(u usage) map[string]any {
	in := u.input - u.cached - u.cacheWrite
	return map[string]any{"inputTokens": in, "outputTokens": u.output, "totalTokens": u.input + u.output,
		"cacheReadInputTokens": u.cached, "cacheWriteInputTokens": u.cacheWrite}
}

func (b bedrockCodec) body(x *exchange, a *answer) []byte {
	x.w.Header().Set("x-amzn-RequestId", "mock-"+x.id)
	var content []any
	if a.tool != nil {
		content = append(content, map[string]any{"toolUse": map[string]any{"toolUseId": a.tool.id, "name": a.tool.name, "input": json.RawMessage(a.tool.args)}})
	} else {
		content = append(content, map[string]any{"text": a.text})
	}
	out, _ := json.Marshal(map[string]any{"output": map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
		"stopReason": cvStop(a.finish), "usage": cvUsage(a.usage), "metrics": map[string]any{"latencyMs": 1}})
	return out
}

// cvStream writes ConverseStream's events as event-stream frames.
type cvStream struct {
	x     *exchange
	enc   *eventstream.Encoder
	index int
	open  bool
}

func (b bedrockCodec) streamer(x *exchange) streamer {
	return &cvStream{x: x, enc: eventstream.NewEncoder()}
}

func (s *cvStream) header(h http.Header) {
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("x-amzn-RequestId", "mock-"+s.x.id)
}

// frame is one event-stream message of a kind ("event" or "exception").
func (s *cvStream) frame(kind, typ string, v map[string]any) []byte {
	v["p"] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[:1+len(typ)%40] // Bedrock pads its events
	payload, _ := json.Marshal(v)
	var msg eventstream.Message
	msg.Headers.Set(":message-type", eventstream.StringValue(kind))
	if kind == "exception" {
		msg.Headers.Set(":exception-type", eventstream.StringValue(typ))
	} else {
		msg.Headers.Set(":event-type", eventstream.StringValue(typ))
	}
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	msg.Payload = payload
	var buf bytes.Buffer
	_ = s.enc.Encode(&buf, msg)
	return buf.Bytes()
}

func (s *cvStream) start() []byte {
	return s.frame("event", "messageStart", map[string]any{"role": "assistant"})
}

func (s *cvStream) stop() []byte {
	if !s.open {
		return nil
	}
	s.open = false
	b := s.frame("event", "contentBlockStop", map[string]any{"contentBlockIndex": s.index})
	s.index++
	return b
}

func (s *cvStream) text(p string) []byte {
	s.open = true
	return s.frame("event", "contentBlockDelta", map[string]any{"contentBlockIndex": s.index, "delta": map[string]any{"text": p}})
}

func (s *cvStream) toolStart(id, name string) []byte {
	b := s.stop()
	s.open = true
	return append(b, s.frame("event", "contentBlockStart", map[string]any{"contentBlockIndex": s.index,
		"start": map[string]any{"toolUse": map[string]any{"toolUseId": id, "name": name}}})...)
}

func (s *cvStream) toolArgs(p string, _ bool) []byte {
	return s.frame("event", "contentBlockDelta", map[string]any{"contentBlockIndex": s.index, "delta": map[string]any{"toolUse": map[string]any{"input": p}}})
}

func (s *cvStream) finish(finish string, u usage, terminate bool) []byte {
	b := s.stop()
	b = append(b, s.frame("event", "messageStop", map[string]any{"stopReason": cvStop(finish)})...)
	if terminate {
		b = append(b, s.frame("event", "metadata", map[string]any{"usage": cvUsage(u), "metrics": map[string]any{"latencyMs": 1}})...)
	}
	return b
}

// malformed is an intact frame (its checksums hold) whose event payload
// is not JSON.
func (s *cvStream) malformed() []byte {
	var msg eventstream.Message
	msg.Headers.Set(":message-type", eventstream.StringValue("event"))
	msg.Headers.Set(":event-type", eventstream.StringValue("contentBlockDelta"))
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	msg.Payload = []byte(`{"contentBlockIndex":` + strconv.Itoa(s.index) + `,"delta":{"text":"garbage`)
	var buf bytes.Buffer
	_ = s.enc.Encode(&buf, msg)
	return buf.Bytes()
}

// badCRC spoils a frame's message CRC (a message's last four bytes) or,
// if prelude, its prelude CRC (bytes 8 to 11, after the total and headers
// lengths).
func (s *cvStream) badCRC(frame []byte, prelude bool) []byte {
	if prelude {
		frame[8] ^= 0xff
	} else {
		frame[len(frame)-1] ^= 0xff
	}
	return frame
}

// fail is an exception frame: throttlingException unless the fault names
// another (modelStreamErrorException, serviceUnavailableException, ...).
func (s *cvStream) fail(f *Fault) []byte {
	typ := orDefault(f.ErrorType, "throttlingException")
	typ = strings.ToLower(typ[:1]) + typ[1:]
	_, _, msg := bedrockFault(&Fault{ErrorType: typ, Message: f.Message})
	v := map[string]any{"message": msg}
	if typ == "modelStreamErrorException" {
		v["originalStatusCode"] = 529
		v["originalMessage"] = "Overloaded"
	}
	return s.frame("exception", typ, v)
}

// stopped answers 200 with no content and a stop reason: a guardrail or
// content filter that intervened (stopReason guardrail_intervened or
// content_filtered), in a Converse body or a ConverseStream.
func (b bedrockCodec) stopped(x *exchange, reason string) {
	x.billPrompt()
	u := x.usage(0)
	if !x.req.stream {
		x.w.Header().Set("x-amzn-RequestId", "mock-"+x.id)
		writeJSON(x.w, 200, map[string]any{"output": map[string]any{"message": map[string]any{"role": "assistant", "content": []any{}}},
			"stopReason": reason, "usage": cvUsage(u), "metrics": map[string]any{"latencyMs": 1}})
		return
	}
	s := b.streamer(x).(*cvStream)
	s.header(x.w.Header())
	x.w.WriteHeader(200)
	out := s.start()
	out = append(out, s.frame("event", "messageStop", map[string]any{"stopReason": reason})...)
	out = append(out, s.frame("event", "metadata", map[string]any{"usage": cvUsage(u), "metrics": map[string]any{"latencyMs": 1}})...)
	_, _ = x.w.Write(out)
}
