package bedrock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/smithy-go"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		status int
		header string
		body   string
		kind   gw.Kind
		cause  gw.Cause
	}{
		{429, "ThrottlingException", `{"message":"Too many requests, please wait before trying again."}`, gw.KindRateLimited, ""},
		{503, "ServiceUnavailableException", `{"message":"Bedrock is unable to process your request."}`, gw.KindUnavailable, ""},
		{429, "ModelNotReadyException", `{"message":"Model is not ready for inference."}`, gw.KindUnavailable, ""},
		{408, "ModelTimeoutException", `{"message":"Model has timed out in processing the request."}`, gw.KindUnavailable, ""},
		{500, "InternalServerException", `{"message":"Internal server error"}`, gw.KindUnavailable, ""},
		{424, "ModelErrorException", `{"message":"The model failed."}`, gw.KindUnavailable, ""},
		{400, "ValidationException", `{"message":"Malformed input request: #: extraneous key [foo] is not permitted"}`, gw.KindRejected, ""},
		{400, "ValidationException", `{"message":"Input is too long for requested model."}`, gw.KindRejected, gw.CauseContextLength},
		{400, "ValidationException", `{"message":"prompt is too long: 210000 tokens > 200000 maximum"}`, gw.KindRejected, gw.CauseContextLength},
		// The route's model id is wrong: the route, not the request.
		{400, "ValidationException", `{"message":"The provided model identifier is invalid."}`, gw.KindRouteUnavailable, ""},
		{400, "ValidationException", `{"message":"Invocation of model ID anthropic.claude-3-5-sonnet-20241022-v2:0 with on-demand throughput isn’t supported. Retry your request with the ID or ARN of an inference profile that contains this model."}`, gw.KindRouteUnavailable, ""},
		{404, "ResourceNotFoundException", `{"message":"Could not resolve the foundation model from the provided model identifier."}`, gw.KindRouteUnavailable, ""},
		{404, "ResourceNotFoundException", `{"message":"This model version has reached the end of its life. Please refer to the AWS documentation for more details."}`, gw.KindRouteUnavailable, ""},
		{404, "", `{"message":"Not Found"}`, gw.KindRouteUnavailable, ""},
		{400, "ConflictException", `{"message":"The request could not be completed due to a conflict."}`, gw.KindRejected, ""},
		{403, "AccessDeniedException", `{"message":"You don't have access to the model with the specified model ID."}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{403, "UnrecognizedClientException", `{"message":"The security token included in the request is invalid."}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{403, "InvalidSignatureException", `{"message":"The request signature we calculated does not match the signature you provided."}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{403, "ExpiredTokenException", `{"message":"The security token included in the request is expired"}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{400, "ServiceQuotaExceededException", `{"message":"Your request exceeds the service quota for your account."}`, gw.KindAccountRefused, gw.CauseQuota},
		// The code in the body when the header is missing, with AWS's
		// namespace and URI decorations.
		{429, "", `{"__type":"com.amazon.coral.availability#ThrottlingException","message":"slow down"}`, gw.KindRateLimited, ""},
		{403, "", `{"__type":"ExpiredTokenException:http://internal.amazon.com/coral/com.amazon.coral.service/","Message":"expired"}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{403, "UnrecognizedClientException:http://internal.amazon.com/coral/com.amazon.coral.service/", `{"message":"bad token"}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		// Unknown codes fall back on the status.
		{502, "", `<html>Bad Gateway</html>`, gw.KindUnavailable, ""},
		{429, "", ``, gw.KindRateLimited, ""},
		{401, "", `{}`, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{413, "", `{}`, gw.KindRejected, ""},
		{302, "", ``, gw.KindProtocolViolation, ""},
	}
	for _, c := range cases {
		h := http.Header{}
		if c.header != "" {
			h.Set("X-Amzn-ErrorType", c.header)
		}
		e := ParseError(c.status, h, []byte(c.body))
		if k, cause := Classify(e); k != c.kind || cause != c.cause {
			t.Errorf("%d %s %s: %s/%s, want %s/%s", c.status, c.header, c.body, k, cause, c.kind, c.cause)
		}
	}
	e := ParseError(403, nil, []byte(`{"__type":"ExpiredTokenException","message":"expired"}`))
	if e.Type != "ExpiredTokenException" || e.Message != "expired" || !IsExpiredCredential(e) {
		t.Errorf("parsed %+v", e)
	}
}

// TestErrorsReadAsSDK: the SDK reads the same error responses with the
// same code, so ParseError reads them as AWS's clients do.
func TestErrorsReadAsSDK(t *testing.T) {
	for _, body := range []string{
		`{"__type":"ThrottlingException","message":"Too many requests"}`,
		`{"__type":"AccessDeniedException","message":"no access"}`,
		`{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}`,
	} {
		c, _ := sdkServer(t, 400, "application/json", []byte(body))
		_, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String("m")})
		var ae smithy.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("SDK error %T %v", err, err)
		}
		e := ParseError(400, http.Header{}, []byte(body))
		if e.Type != ae.ErrorCode() || e.Message != ae.ErrorMessage() {
			t.Errorf("parsed %s/%q, the SDK %s/%q", e.Type, e.Message, ae.ErrorCode(), ae.ErrorMessage())
		}
	}
}

func checkBounded(t *testing.T, field, s string) {
	t.Helper()
	if len(s) > maxField || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		t.Fatalf("%s not bounded and clean: %q", field, s)
	}
}

// FuzzParseBedrockError: an error response is untrusted input. Parsing
// and classifying it never panics, and every field it keeps is bounded,
// valid UTF-8 and free of control characters.
func FuzzParseBedrockError(f *testing.F) {
	f.Add(429, "ThrottlingException", []byte(`{"message":"slow down"}`))
	f.Add(403, "", []byte(`{"__type":"a#ExpiredTokenException:uri","Message":"x"}`))
	f.Add(400, "ValidationException:", []byte(`{"message":"Input is too long"}`))
	f.Add(500, "#", []byte("\xff\x00{"))
	f.Add(0, "", []byte(`{"code":1,"message":{}}`))
	f.Fuzz(func(t *testing.T, status int, header string, body []byte) {
		h := http.Header{}
		h.Set("X-Amzn-ErrorType", header)
		e := ParseError(status, h, body)
		checkBounded(t, "type", e.Type)
		checkBounded(t, "message", e.Message)
		if k, _ := Classify(e); !k.Valid() || k == gw.KindOK {
			t.Fatalf("kind %q", k)
		}
		x := ParseException(header, body)
		checkBounded(t, "exception type", x.Type)
		checkBounded(t, "exception message", x.Message)
		if k, _ := ClassifyStream(x); !k.Valid() || k == gw.KindOK {
			t.Fatalf("stream kind %q", k)
		}
	})
}

// FuzzDecodeConverseStream: a ConverseStream body is untrusted input.
// Decoding never panics, ends (every call consumes input or ends the
// stream), keeps every error it reports bounded, and never produces an
// event from a message that did not decode.
func FuzzDecodeConverseStream(f *testing.F) {
	for _, frames := range fixtures {
		f.Add(encodeFrames(f, frames))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 0})
	f.Add(encodeFrames(f, []frame{{event: "contentBlockDelta", payload: `{"contentBlockIndex":-1,"delta":{"toolUse":{"input":"x"}}}`}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewStream(bytes.NewReader(data), "m")
		var evs []provider.Event
		for i := 0; i <= len(data); i++ {
			before := len(evs)
			var err error
			evs, err = s.Next(evs)
			var me *MalformedError
			if errors.As(err, &me) {
				if len(evs) != before {
					t.Fatal("a malformed message produced events")
				}
				continue
			}
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrFraming) && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("unexpected end %v", err)
				}
				for _, e := range evs {
					if e.Err != nil {
						checkBounded(t, "stream error type", e.Err.Type)
						checkBounded(t, "stream error message", e.Err.Message)
					}
				}
				return
			}
		}
		t.Fatal("the stream never ended")
	})
}
