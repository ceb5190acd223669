package bedrock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/bedrock"
)

// These tests run the package against the independent Bedrock fake of
// internal/mock (written from the API reference, with a real SigV4
// check): requests it accepts, answers and streams it writes that this
// package reads, and its faults classified.

func staticCreds(id, secret string) aws.CredentialsProviderFunc {
	return func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, Source: "test"}, nil
	}
}

func call(t *testing.T, url string, auth *bedrock.Auth, model string, stream bool, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+bedrock.Path(model, stream), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := auth.Sign(context.Background(), req, body); err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func chat(t *testing.T, body string) []byte {
	t.Helper()
	in, err := provider.ParseRequest(provider.OpenAI, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bedrock.BuildRequest(in, provider.Target{Model: "x", MaxOutputTokens: 200}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b.Body
}

func TestAgainstTheMock(t *testing.T) {
	m := mock.New(mock.Config{CachedTokens: 4})
	srv := httptest.NewServer(m)
	defer srv.Close()
	auth := bedrock.NewAuthWith(mock.DefaultAWS.Region, staticCreds(mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey))
	const model = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
	body := chat(t, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say something."}]}`)

	res := call(t, srv.URL, auth, model, false, body)
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("converse: %d %s", res.StatusCode, raw)
	}
	r, err := bedrock.DecodeResponse(raw, model)
	if err != nil || r.Text == "" || r.Finish != provider.FinishStop || r.Usage.OutputTokens == 0 || r.Usage.CachedTokens != 4 {
		t.Fatalf("converse answer %+v %v\n%s", r, err, raw)
	}

	res = call(t, srv.URL, auth, model, true, body)
	if res.StatusCode != 200 {
		t.Fatalf("converse-stream: %d", res.StatusCode)
	}
	s := bedrock.NewStream(res.Body, model)
	var evs []provider.Event
	var text strings.Builder
	for {
		var err error
		n := len(evs)
		evs, err = s.Next(evs)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		for _, e := range evs[n:] {
			if e.Kind == provider.EvText {
				text.WriteString(e.Text)
			}
		}
	}
	if text.String() != r.Text {
		t.Errorf("streamed %q, answered %q", text.String(), r.Text)
	}
	kinds := []provider.EventKind{}
	for _, e := range evs {
		if e.Kind != provider.EvText {
			kinds = append(kinds, e.Kind)
		}
	}
	if want := []provider.EventKind{provider.EvStart, provider.EvFinish, provider.EvUsage, provider.EvDone}; !equalKinds(kinds, want) {
		t.Errorf("stream kinds %v, want %v", kinds, want)
	}

	// Tools: the fake calls the tool it is told to.
	body = chat(t, `{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":"required"}`)
	res = call(t, srv.URL, auth, model, false, body)
	raw, _ = io.ReadAll(res.Body)
	r, err = bedrock.DecodeResponse(raw, model)
	if err != nil || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "get_weather" || r.Finish != provider.FinishToolCalls {
		t.Fatalf("tool answer %+v %v\n%s", r, err, raw)
	}
}

func equalKinds(a, b []provider.EventKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMockFaultsClassified(t *testing.T) {
	const model = "m1"
	for _, c := range []struct {
		fault mock.Fault
		creds aws.CredentialsProviderFunc
		kind  gw.Kind
		cause gw.Cause
	}{
		{mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "1"}, nil, gw.KindRateLimited, ""},
		{mock.Fault{Type: mock.FaultStatus, Status: 503}, nil, gw.KindUnavailable, ""},
		{mock.Fault{Type: mock.FaultStatus, Status: 500}, nil, gw.KindUnavailable, ""},
		{mock.Fault{Type: mock.FaultAuth}, nil, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{mock.Fault{Type: mock.FaultAuth, ErrorType: "ExpiredTokenException"}, nil, gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{mock.Fault{Type: mock.FaultContextLength}, nil, gw.KindRejected, gw.CauseContextLength},
		{mock.Fault{}, staticCreds(mock.DefaultAWS.AccessKeyID, "wrong-secret"), gw.KindAccountRefused, gw.CauseUpstreamAuth},
		{mock.Fault{}, staticCreds("AKIDUNKNOWN", "x"), gw.KindAccountRefused, gw.CauseUpstreamAuth},
	} {
		cfg := mock.Config{}
		if c.fault.Type != "" {
			cfg.Script = mock.Script{Rules: []mock.Rule{{Fault: c.fault}}}
		}
		m := mock.New(cfg)
		srv := httptest.NewServer(m)
		creds := c.creds
		if creds == nil {
			creds = staticCreds(mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey)
		}
		auth := bedrock.NewAuthWith(mock.DefaultAWS.Region, creds)
		res := call(t, srv.URL, auth, model, false, chat(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		raw, _ := io.ReadAll(res.Body)
		ue := bedrock.ParseError(res.StatusCode, res.Header, raw)
		if k, cause := bedrock.Classify(ue); k != c.kind || cause != c.cause {
			t.Errorf("%+v: %d %s %q: %s/%s, want %s/%s", c.fault, res.StatusCode, ue.Type, ue.Message, k, cause, c.kind, c.cause)
		}
		srv.Close()
	}

	// A throttle inside the stream, before output.
	m := mock.New(mock.Config{Script: mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 0}}}}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	auth := bedrock.NewAuthWith(mock.DefaultAWS.Region, staticCreds(mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey))
	res := call(t, srv.URL, auth, model, true, chat(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	s := bedrock.NewStream(res.Body, model)
	var evs []provider.Event
	var err error
	for err == nil {
		evs, err = s.Next(evs)
	}
	var me *bedrock.MalformedError
	if errors.As(err, &me) {
		t.Fatal(err)
	}
	var ue *provider.UpstreamError
	for _, e := range evs {
		if e.Kind == provider.EvError {
			ue = e.Err
		}
	}
	if ue == nil {
		t.Fatalf("no exception in %+v (%v)", evs, err)
	}
	if k, _ := bedrock.ClassifyStream(ue); k != gw.KindRateLimited {
		t.Errorf("stream exception %+v: %s", ue, k)
	}
}
