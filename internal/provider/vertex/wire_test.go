package vertex_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/gemini"
	"github.com/oncegate/oncegate/internal/provider/vertex"
	"github.com/oncegate/oncegate/internal/sse"
)

// These tests hold the codecs to the mock's Gemini and Vertex fakes,
// which are written from Google's documentation independently of them
// (docs/mock.md), over real HTTP on 127.0.0.1.

func startMock(t *testing.T, cfg mock.Config) (*mock.Mock, string) {
	t.Helper()
	m := mock.New(cfg)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(m.Close)
	return m, srv.URL
}

func clientRequest(t *testing.T, p provider.Protocol, body string) *provider.ClientRequest {
	t.Helper()
	in, err := provider.ParseRequest(p, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func post(t *testing.T, url string, h http.Header, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func streamEvents(t *testing.T, body []byte, dec provider.Decoder) []provider.Event {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(body), 1<<20)
	var out []provider.Event
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if out, err = dec.Decode(ev, out); err != nil {
			t.Fatalf("malformed event %s: %v", ev.Data, err)
		}
	}
}

func text(evs []provider.Event) (s, finish string, u gw.Usage, tools []string) {
	for _, e := range evs {
		switch e.Kind {
		case provider.EvText:
			s += e.Text
		case provider.EvFinish:
			finish = e.Finish
		case provider.EvUsage:
			u = e.Usage
		case provider.EvToolStart:
			tools = append(tools, e.ToolName)
		}
	}
	return
}

const chat = `{"model":"chat","max_tokens":50,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about receipts."}]}`
const chatTools = `{"model":"chat","messages":[{"role":"user","content":"Search."}],"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]}`

func TestGeminiAPIWire(t *testing.T) {
	m, base := startMock(t, mock.Config{Tokens: 12})
	h := http.Header{}
	gemini.Authenticate(h, mock.DefaultGeminiAPIKey)
	in := clientRequest(t, provider.OpenAI, chat)
	body, err := gemini.BuildRequest(in, provider.Target{Model: "gemini-2.5-flash"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, b := post(t, gemini.URL(base, "gemini-2.5-flash", false), h.Clone(), body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	r, err := gemini.DecodeResponse(b)
	if err != nil || r.Text == "" || r.Finish != provider.FinishStop || r.Usage.OutputTokens != 12 || r.Usage.InputTokens == 0 {
		t.Fatalf("answer %+v %v", r, err)
	}

	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", true), h.Clone(), body)
	s, finish, u, _ := text(streamEvents(t, b, gemini.NewDecoder()))
	if status != 200 || s != r.Text || finish != provider.FinishStop || u != r.Usage {
		t.Fatalf("stream %d %q %q %+v, json %q %+v", status, s, finish, u, r.Text, r.Usage)
	}

	body, _ = gemini.BuildRequest(clientRequest(t, provider.OpenAI, chatTools), provider.Target{Model: "gemini-2.5-flash"}, nil)
	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", true), h.Clone(), body)
	_, finish, _, tools := text(streamEvents(t, b, gemini.NewDecoder()))
	if status != 200 || finish != provider.FinishToolCalls || len(tools) != 1 || tools[0] != "search" {
		t.Fatalf("tool stream %d %q %v: %s", status, finish, tools, b)
	}

	// A refused key is the account's refusal, not the request's.
	bad := http.Header{}
	gemini.Authenticate(bad, "wrong-key")
	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", false), bad, body)
	if k, cause := gemini.Classify(gemini.ParseError(status, b)); k != gw.KindAccountRefused || cause != gw.CauseUpstreamAuth {
		t.Fatalf("refused key: %d %s classified %s/%s", status, b, k, cause)
	}
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultQuota}}}})
	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", false), h.Clone(), body)
	if k, _ := gemini.Classify(gemini.ParseError(status, b)); k != gw.KindRateLimited {
		t.Fatalf("quota: %d %s classified %s", status, b, k)
	}
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", false), h.Clone(), body)
	if k, _ := gemini.Classify(gemini.ParseError(status, b)); k != gw.KindUnavailable {
		t.Fatalf("503: %d %s classified %s", status, b, k)
	}
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultContentPolicy}}}})
	status, b = post(t, gemini.URL(base, "gemini-2.5-flash", false), h.Clone(), body)
	if r, err := gemini.DecodeResponse(b); status != 200 || err != nil || r.Finish != provider.FinishContentFilter || r.Refusal == "" {
		t.Fatalf("blocked prompt: %d %s → %+v %v", status, b, r, err)
	}
}

func TestVertexWire(t *testing.T) {
	m, base := startMock(t, mock.Config{Tokens: 10})
	tokens, err := vertex.NewTokens(mock.ServiceAccountJSON(base), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Token(context.Background())
	if err != nil {
		t.Fatalf("token from the mock's endpoint (its token_uri): %v", err)
	}
	h := http.Header{}
	vertex.Authenticate(h, tok)

	g := vertex.Route{BaseURL: base, Project: "oncegate-mock", Location: "us-central1", Publisher: vertex.PublisherGoogle}
	in := clientRequest(t, provider.Anthropic, `{"model":"chat","max_tokens":50,"system":"Be brief.","messages":[{"role":"user","content":"Hello"}]}`)
	built, err := g.BuildRequest(in, provider.Target{Model: "gemini-2.5-pro"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, b := post(t, g.URL("gemini-2.5-pro", false), h.Clone(), built.Body)
	r, err := g.DecodeResponse(b)
	if status != 200 || err != nil || r.Text == "" || r.Usage.OutputTokens != 10 {
		t.Fatalf("gemini on vertex %d %s: %+v %v", status, b, r, err)
	}

	a := vertex.Route{BaseURL: base, Project: "oncegate-mock", Location: "us-east5", Publisher: vertex.PublisherAnthropic}
	for _, stream := range []bool{false, true} {
		built, err = a.BuildRequest(in, provider.Target{Model: "claude-sonnet-4@20250514", Stream: stream}, nil)
		if err != nil {
			t.Fatal(err)
		}
		status, b = post(t, a.URL("claude-sonnet-4@20250514", stream), h.Clone(), built.Body)
		if status != 200 {
			t.Fatalf("rawPredict stream=%v %d %s", stream, status, b)
		}
		if stream {
			s, finish, u, _ := text(streamEvents(t, b, a.NewDecoder()))
			if s == "" || finish != provider.FinishStop || u.OutputTokens != 10 {
				t.Fatalf("streamRawPredict %q %q %+v", s, finish, u)
			}
			continue
		}
		if r, err := a.DecodeResponse(b); err != nil || r.Text == "" || r.Usage.OutputTokens != 10 {
			t.Fatalf("rawPredict %s: %+v %v", b, r, err)
		}
	}
	if n := m.TokensIssued(); n != 1 {
		t.Errorf("token endpoint issued %d tokens, want 1 (cached)", n)
	}

	// A bad or expired token is refused as the account's.
	built, _ = a.BuildRequest(in, provider.Target{Model: "claude-sonnet-4@20250514"}, nil)
	bad := http.Header{}
	vertex.Authenticate(bad, "ya29.not-a-token")
	status, b = post(t, a.URL("claude-sonnet-4@20250514", false), bad, built.Body)
	if k, cause := vertex.Classify(vertex.ParseError(status, b)); k != gw.KindAccountRefused || cause != gw.CauseUpstreamAuth {
		t.Fatalf("bad token: %d %s classified %s/%s", status, b, k, cause)
	}
	// A key the token endpoint does not know is refused at the token.
	other := strings.Replace(string(mock.ServiceAccountJSON(base)), mock.DefaultServiceAccountEmail, "stranger@x.iam.gserviceaccount.com", 1)
	strange, err := vertex.NewTokens([]byte(other), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = strange.Token(context.Background())
	if k, cause := vertex.ClassifyTokenError(err); k != gw.KindAccountRefused || cause != gw.CauseUpstreamAuth {
		t.Fatalf("unknown account: %v classified %s/%s", err, k, cause)
	}
}
