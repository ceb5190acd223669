package provider

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/sse"
)

// Real error payloads, as the providers document and send them.
func TestClassifyProviderErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		kind   gw.Kind
		cause  gw.Cause
		code   string
	}{
		{"openai rate limit", 429, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, gw.KindRateLimited, "", "rate_limit_exceeded"},
		{"openai insufficient quota", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, gw.KindAccountRefused, gw.CauseQuota, "insufficient_quota"},
		{"openai billing hard limit", 400, `{"error":{"message":"Billing hard limit has been reached","type":"invalid_request_error","param":null,"code":"billing_hard_limit_reached"}}`, gw.KindAccountRefused, gw.CauseQuota, "billing_hard_limit_reached"},
		{"anthropic credit balance", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`, gw.KindAccountRefused, gw.CauseQuota, ""},
		{"openai context length", 400, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130012 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, gw.KindRejected, gw.CauseContextLength, "context_length_exceeded"},
		{"openai content policy", 400, `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","param":null,"code":"content_policy_violation"}}`, gw.KindPolicyDenied, "", "content_policy_violation"},
		{"azure content filter", 400, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}`, gw.KindPolicyDenied, "", "content_filter"},
		{"openai invalid key", 401, `{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth, "invalid_api_key"},
		// The route's own model or path missing is the route's fault
		// (route_unavailable); an object the request names is not.
		{"openai model not found", 404, "{\"error\":{\"message\":\"The model `gpt-9` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}", gw.KindRouteUnavailable, "", "model_not_found"},
		{"openai invalid model id 400", 400, `{"error":{"message":"invalid model ID","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, gw.KindRouteUnavailable, "", "model_not_found"},
		{"openai invalid url", 404, `{"error":{"message":"Invalid URL (POST /v1/chat/completion)","type":"invalid_request_error","param":null,"code":null}}`, gw.KindRouteUnavailable, "", ""},
		{"openai previous response not found", 404, `{"error":{"message":"Previous response with id 'resp_abc123' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`, gw.KindRejected, "", "previous_response_not_found"},
		{"anthropic model not found", 404, `{"type":"error","error":{"type":"not_found_error","message":"model: claude-9-opus"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, gw.KindRouteUnavailable, "", ""},
		{"anthropic path not found", 404, `{"type":"error","error":{"type":"not_found_error","message":"Not Found"}}`, gw.KindRouteUnavailable, "", ""},
		{"anthropic file not found", 404, `{"type":"error","error":{"type":"not_found_error","message":"File not found: file_011CNha8iCJcU1wXNR6q4V8w"}}`, gw.KindRejected, "", ""},
		{"vllm model does not exist", 404, "{\"object\":\"error\",\"message\":\"The model `llama-9` does not exist.\",\"type\":\"NotFoundError\",\"param\":null,\"code\":404}", gw.KindRouteUnavailable, "", ""},
		{"ollama model not found", 404, `{"error":"model \"llama9\" not found, try pulling it first"}`, gw.KindRouteUnavailable, "", ""},
		{"a path no server serves", 404, `<html><body><h1>404 Not Found</h1></body></html>`, gw.KindRouteUnavailable, "", ""},
		{"fastapi path not found", 404, `{"detail":"Not Found"}`, gw.KindRouteUnavailable, "", ""},
		{"openai server error", 500, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`, gw.KindUnavailable, "", ""},
		{"openai overloaded 503", 503, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`, gw.KindUnavailable, "", ""},
		{"gateway html 502", 502, `<html><head><title>502 Bad Gateway</title></head></html>`, gw.KindUnavailable, "", ""},
		{"timeout 504 empty", 504, ``, gw.KindUnavailable, "", ""},
		{"request timeout 408", 408, `{"error":{"message":"Request timed out."}}`, gw.KindUnavailable, "", ""},
		{"anthropic overloaded 529", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, gw.KindUnavailable, "", ""},
		{"anthropic rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, gw.KindRateLimited, "", ""},
		{"anthropic api error", 500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, gw.KindUnavailable, "", ""},
		{"anthropic prompt too long", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 201234 tokens > 200000 maximum"}}`, gw.KindRejected, gw.CauseContextLength, ""},
		{"anthropic input + max_tokens over the window", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 198000 + 8192 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`, gw.KindRejected, gw.CauseContextLength, ""},
		{"anthropic prefill refused", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`, gw.KindRejected, "", ""},
		{"anthropic output blocked", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}`, gw.KindPolicyDenied, "", ""},
		{"anthropic auth", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth, ""},
		{"anthropic permission", 403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, gw.KindAccountRefused, gw.CauseUpstreamAuth, ""},
		{"anthropic too large", 413, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, gw.KindRejected, "", ""},
		{"vllm unprocessable", 422, `{"object":"error","message":"[{'type': 'missing', 'loc': ('body', 'model')}]","type":"BadRequestError","param":null,"code":422}`, gw.KindRejected, "", ""},
		{"error as a string", 400, `{"error":"bad request"}`, gw.KindRejected, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := ParseError(tc.status, []byte(tc.body))
			k, c := Classify(e)
			if k != tc.kind || c != tc.cause || e.Code != tc.code {
				t.Fatalf("got %s/%s code %q, want %s/%s code %q (%+v)", k, c, e.Code, tc.kind, tc.cause, tc.code, e)
			}
		})
	}
}

func TestClassifyStreamErrors(t *testing.T) {
	for body, want := range map[string]gw.Kind{
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`:            gw.KindUnavailable,
		`{"error":{"message":"The server had an error","type":"server_error"}}`:                  gw.KindUnavailable,
		`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`:             gw.KindRateLimited,
		`{"error":{"message":"blocked","type":"invalid_request_error","code":"content_filter"}}`: gw.KindPolicyDenied,
	} {
		if k, _ := ClassifyStreamError(ParseError(0, []byte(body))); k != want {
			t.Errorf("%s: %s, want %s", body, k, want)
		}
	}
}

// FuzzParseError: any error body is read without panicking into bounded,
// printable fields and one kind.
func FuzzParseError(f *testing.F) {
	f.Add(429, []byte(`{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded","param":null}}`))
	f.Add(529, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add(400, []byte(`{"error":{"code":12,"message":["a"]}}`))
	f.Add(500, []byte("\x00\xff<html>"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := ParseError(status, body)
		for _, s := range []string{e.Type, e.Code, e.Message, e.Param} {
			if len(s) > maxErrorField || !utf8.ValidString(s) {
				t.Fatalf("unbounded or invalid field %q", s)
			}
			for _, r := range s {
				if r < 0x20 || r == 0x7f {
					t.Fatalf("control character in %q", s)
				}
			}
		}
		if k, _ := Classify(e); !k.Valid() {
			t.Fatalf("invalid kind %q", k)
		}
	})
}

// FuzzStreamDecoders: hostile stream events never panic either decoder.
func FuzzStreamDecoders(f *testing.F) {
	f.Add("", []byte(`{"choices":[{"delta":{"content":"x","tool_calls":[{"index":-5,"function":{"arguments":"{"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`))
	f.Add("content_block_delta", []byte(`{"type":"content_block_delta","index":99,"delta":{"type":"input_json_delta","partial_json":"x"}}`))
	f.Add("message_delta", []byte(`{"type":"message_delta","usage":{"output_tokens":3,"input_tokens":null}}`))
	f.Add("error", []byte(`{"type":"error","error":{"type":"overloaded_error"}}`))
	f.Add("response.completed", []byte(`{"type":"response.completed","response":{"id":"r","object":"response","status":"incomplete","output":[{"type":"function_call","call_id":"c"}],"usage":{"input_tokens":1}}}`))
	f.Add("response.output_item.added", []byte(`{"type":"response.output_item.added","output_index":-1,"item":{"type":"function_call"}}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		for _, p := range []Protocol{OpenAI, Anthropic, Responses} {
			// The relay hands a decoder the SSE reader's own buffer
			// (sse.Reader.NextView), written over by the next event: what
			// it decodes must keep nothing of it.
			view := bytes.Clone(data)
			got, gotErr := NewDecoder(p).Decode(sse.Event{Type: typ, Data: view}, nil)
			for i := range view {
				view[i] = 'x'
			}
			want, wantErr := NewDecoder(p).Decode(sse.Event{Type: typ, Data: bytes.Clone(data)}, nil)
			if !reflect.DeepEqual(got, want) || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s %q %q: decoded %+v (%v), and %+v (%v) once its bytes were written over", p, typ, data, want, wantErr, got, gotErr)
			}
		}
	})
}

// FuzzFastTextBlockDelta: when the fast read of an Anthropic text delta
// takes an event, it reads the text the general decoder reads from it.
func FuzzFastTextBlockDelta(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word"}}`,
		`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"a\"b\\n\u00e9 é"}}`,
		`{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","extra":1}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		text, ok := fastTextBlockDelta(data)
		if !ok {
			return
		}
		var e anStreamEvent
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%q: fast read %q, encoding/json refuses it: %v", data, text, err)
		}
		// What the general path reads: a text_delta of that text.
		if e.Type != "content_block_delta" || e.Delta == nil || e.Delta.Type != "text_delta" || e.Delta.Text != text {
			t.Fatalf("%q: fast read %q, encoding/json reads %+v", data, text, e)
		}
	})
}
