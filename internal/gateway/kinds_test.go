package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/scrub/scrubtest"
)

// post sends a raw request as the acme tenant and returns the response and
// its body.
func (e *env) post(path, body string, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	return e.postKey(keyAcme, path, body, headers)
}

func chatBody(model string, stream bool) string {
	return `{"model":"` + model + `","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"What is a logical request?"}]}`
}

func rules(rs ...mock.Rule) mock.Script { return mock.Script{Rules: rs} }

func always(f mock.Fault) mock.Rule { return mock.Rule{Fault: f} }

func first(n int, f mock.Fault) mock.Rule { return mock.Rule{FirstCalls: n, Fault: f} }

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
	Oncegate struct {
		RequestID string `json:"request_id"`
		Attempts  int    `json:"attempts"`
		Terminal  string `json:"terminal"`
		Reason    string `json:"reason"`
	} `json:"oncegate"`
}

// Each outcome kind of docs/retries.md, end to end: the mocks' own counters
// must equal the receipt's attempts and X-Oncegate-Attempts.
func TestOutcomeKindsEndToEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		primary, fallback   mock.Script
		status              int
		code                string // gateway or provider error code; "" for success
		retryHeader         string
		primaryN, fallbackN int
		terminal, reason    string
		kinds               []string
	}{
		{name: "reset before headers retries the same route", primary: rules(first(1, mock.Fault{Type: mock.FaultReset})),
			status: 200, primaryN: 2, terminal: "succeeded", reason: "completed", kinds: []string{"timeout_before_response", "ok"}},
		{name: "first-byte timeout moves to the fallback", primary: rules(always(mock.Fault{Type: mock.FaultHang})),
			status: 200, primaryN: 1, fallbackN: 1, terminal: "succeeded", reason: "completed", kinds: []string{"timeout_before_response", "ok"}},
		{name: "rate limited then served", primary: rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "0.1"})),
			status: 200, primaryN: 2, terminal: "succeeded", reason: "completed", kinds: []string{"rate_limited", "ok"}},
		{name: "unavailable everywhere exhausts the attempt budget",
			primary: rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})), fallback: rules(always(mock.Fault{Type: mock.FaultStatus, Status: 502})),
			status: 503, code: api.CodeUpstreamUnavailable, retryHeader: "false", primaryN: 3, fallbackN: 1, terminal: "exhausted", reason: "attempt_budget",
			kinds: []string{"unavailable", "unavailable", "unavailable", "unavailable"}},
		{name: "rejected passes the provider's error through",
			primary: rules(always(mock.Fault{Type: mock.FaultStatus, Status: 400, Message: "messages[0].content: unknown field 'colour'"})),
			status:  400, code: "", retryHeader: "false", primaryN: 1, terminal: "rejected", reason: "non_retryable", kinds: []string{"rejected"}},
		{name: "policy denied never falls back", primary: rules(always(mock.Fault{Type: mock.FaultContentPolicy})),
			status: 400, code: "content_policy_violation", retryHeader: "false", primaryN: 1, terminal: "rejected", reason: "non_retryable", kinds: []string{"policy_denied"}},
		{name: "context length falls back to a larger context", primary: rules(always(mock.Fault{Type: mock.FaultContextLength})),
			status: 200, primaryN: 1, fallbackN: 1, terminal: "succeeded", reason: "completed", kinds: []string{"rejected", "ok"}},
		{name: "an exhausted balance moves to another account at once", primary: rules(always(mock.Fault{Type: mock.FaultQuota})),
			status: 200, primaryN: 1, fallbackN: 1, terminal: "succeeded", reason: "completed", kinds: []string{"account_refused", "ok"}},
		{name: "exhausted balances everywhere are the gateway's fault, not the request's",
			primary: rules(always(mock.Fault{Type: mock.FaultQuota})), fallback: rules(always(mock.Fault{Type: mock.FaultQuota})),
			status: 502, code: api.CodeUpstreamAuthFailed, retryHeader: "false", primaryN: 1, fallbackN: 1, terminal: "exhausted", reason: "routes_exhausted",
			kinds: []string{"account_refused", "account_refused"}},
		{name: "an unreadable body is a protocol violation", primary: rules(always(mock.Fault{Type: mock.FaultGarbage})),
			status: 502, code: api.CodeProtocolViolation, retryHeader: "false", primaryN: 1, terminal: "rejected", reason: "non_retryable", kinds: []string{"protocol_violation"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: 8}}, func(t *testing.T, e *env) {
				e.primary.SetScript(tc.primary)
				e.fallback.SetScript(tc.fallback)
				res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
				if res.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
				}
				id := res.Header.Get("X-Oncegate-Request-Id")
				r := e.receipt(id)
				p, f, _ := e.upstreamCalls(id)
				if int(p.Requests) != tc.primaryN || int(f.Requests) != tc.fallbackN {
					t.Fatalf("upstream calls primary %d fallback %d, want %d and %d", p.Requests, f.Requests, tc.primaryN, tc.fallbackN)
				}
				if n := len(r.Attempts); n != tc.primaryN+tc.fallbackN || res.Header.Get("X-Oncegate-Attempts") != strconv.Itoa(n) {
					t.Fatalf("receipt attempts %d, header %q, upstream %d", n, res.Header.Get("X-Oncegate-Attempts"), tc.primaryN+tc.fallbackN)
				}
				if r.Terminal != tc.terminal || r.Reason != tc.reason {
					t.Fatalf("terminal %s/%s, want %s/%s", r.Terminal, r.Reason, tc.terminal, tc.reason)
				}
				for i, k := range tc.kinds {
					if r.Attempts[i].Kind != k {
						t.Fatalf("attempt %d kind %s, want %s", i+1, r.Attempts[i].Kind, k)
					}
				}
				if tc.status == 200 {
					return
				}
				if got := res.Header.Get("x-should-retry"); got != tc.retryHeader {
					t.Fatalf("x-should-retry %q, want %q", got, tc.retryHeader)
				}
				var eb errorBody
				if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Message == "" {
					t.Fatalf("error body %s: %v", body, err)
				}
				if tc.code != "" && (eb.Error.Code == nil || *eb.Error.Code != tc.code) {
					t.Fatalf("code %v, want %s (%s)", eb.Error.Code, tc.code, body)
				}
				if eb.Oncegate.RequestID != id || eb.Oncegate.Attempts != len(r.Attempts) || eb.Oncegate.Terminal != tc.terminal {
					t.Fatalf("oncegate block %+v", eb.Oncegate)
				}
			})
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfterMS: "150"})))
		res, _ := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		a1, a2 := r.Attempts[0], r.Attempts[1]
		if *a1.RetryAfterMS != 150 || a2.NotBefore.Sub(a1.ObservedAt) != 150*time.Millisecond || a2.StartedAt.Before(a2.NotBefore) {
			t.Fatalf("hint %v, wait %v, started %v before not_before %v", *a1.RetryAfterMS, a2.NotBefore.Sub(a1.ObservedAt), a2.StartedAt, a2.NotBefore)
		}
		// A hint above retry_after_cap (300ms) cannot be waited out: the
		// next route serves after base_delay (docs/retries.md).
		e.primary.Reset()
		e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "3600"})))
		start := time.Now()
		res, _ = e.post("/v1/chat/completions", chatBody("chat", false), nil)
		r = e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if wait := r.Attempts[1].NotBefore.Sub(r.Attempts[0].ObservedAt); wait != 20*time.Millisecond || r.Attempts[1].Route != "fallback" || time.Since(start) > 3*time.Second {
			t.Fatalf("wait %v before %s", wait, r.Attempts[1].Route)
		}
	})
}

// The official SDK at its default settings (2 retries) during a full
// outage: x-should-retry: false keeps it from multiplying the gateway's
// attempts, so the providers see exactly the policy's bound.
func TestSDKDefaultRetriesDoNotMultiplyDuringAnOutage(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		var h http.Header
		client := e.openai(&h)
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat", Messages: userMsg("hi")})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
			t.Fatalf("want a 503 from the SDK, got %v", err)
		}
		total := e.primary.Stats().Requests + e.fallback.Stats().Requests
		if total != 4 {
			t.Fatalf("providers saw %d attempts; the policy bound is 4 (the SDK must not retry)", total)
		}
		if r := e.receipt(h.Get("X-Oncegate-Request-Id")); len(r.Attempts) != 4 || r.ClientRetryCount != 0 {
			t.Fatalf("receipt: %d attempts, client retries %d", len(r.Attempts), r.ClientRetryCount)
		}

		// The same with the Anthropic SDK and 529 overloaded.
		e.anthropic.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 529})))
		ac := e.anthropicClient(nil)
		_, err = ac.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude", MaxTokens: 50,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
		var anErr *anthropic.Error
		if !errors.As(err, &anErr) || anErr.StatusCode != 503 {
			t.Fatalf("want 503 from the Anthropic SDK, got %v", err)
		}
		if n := e.anthropic.Stats().Requests; n != 2 {
			t.Fatalf("anthropic mock saw %d attempts, the claude route allows 2", n)
		}
	})
}

func TestGatewayRejectionsMakeNoUpstreamCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mock.Config{})
	tests := []struct {
		name, path, body string
		headers          map[string]string
		status           int
		code, param      string
	}{
		{"unknown alias", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, nil, 404, api.CodeModelNotFound, "model"},
		{"not JSON", "/v1/chat/completions", `{"model":`, nil, 400, api.CodeInvalidRequest, ""},
		{"no messages", "/v1/chat/completions", `{"model":"chat","messages":[]}`, nil, 400, api.CodeInvalidRequest, "messages"},
		{"bad role", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"wizard","content":"x"}]}`, nil, 400, api.CodeInvalidRequest, "messages[0].role"},
		{"n > 8", "/v1/chat/completions", `{"model":"chat","n":9,"messages":[{"role":"user","content":"x"}]}`, nil, 400, api.CodeInvalidRequest, "n"},
		{"duplicate keys", "/v1/chat/completions", `{"model":"chat","model":"chat","messages":[{"role":"user","content":"x"}]}`, nil, 400, api.CodeInvalidRequest, ""},
		{"bad timeout header", "/v1/chat/completions", chatBody("chat", false), map[string]string{"X-Oncegate-Timeout-Ms": "soon"}, 400, api.CodeInvalidRequest, "X-Oncegate-Timeout-Ms"},
		{"anthropic without max_tokens", "/v1/messages", `{"model":"claude","messages":[{"role":"user","content":"x"}]}`, nil, 400, api.CodeInvalidRequest, "max_tokens"},
		{"image on a text-only alias", "/v1/chat/completions", `{"model":"solo","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, nil, 400, api.CodeInvalidRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body := e.post(tc.path, tc.body, tc.headers)
			if res.StatusCode != tc.status || res.Header.Get("x-should-retry") != "false" {
				t.Fatalf("status %d x-should-retry %q: %s", res.StatusCode, res.Header.Get("x-should-retry"), body)
			}
			var eb struct {
				Error struct {
					Code, Param, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code != tc.code || eb.Error.Message == "" {
				t.Fatalf("body %s", body)
			}
			// The OpenAI shape names the field in param; the Anthropic shape,
			// which has no param, in the message.
			if named := eb.Error.Param == tc.param || (tc.path == "/v1/messages" && strings.Contains(eb.Error.Message, tc.param)); !named {
				t.Fatalf("the error does not name %q: %s", tc.param, body)
			}
		})
	}
	if n := e.primary.Stats().Requests + e.fallback.Stats().Requests + e.anthropic.Stats().Requests; n != 0 {
		t.Fatalf("%d upstream calls for rejected requests", n)
	}
	// Authentication.
	req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", bytes.NewBufferString(chatBody("chat", false)))
	req.Header.Set("Authorization", "Bearer wrong")
	res, err := e.client.Do(req)
	if err != nil || res.StatusCode != 401 || res.Header.Get("x-should-retry") != "false" {
		t.Fatalf("bad key: %v %v", res.StatusCode, err)
	}
}

// Bodies that differ only in a lone UTF-16 surrogate are not I-JSON: they
// are refused before anything is stored or sent (read as U+FFFD, they
// would share an identity and replay each other's answers).
func TestLoneSurrogatesAreRefused(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		for _, s := range []string{`x\ud800`, `x\udfff`} {
			body := `{"model":"chat","messages":[{"role":"user","content":"` + s + `"}]}`
			res, out := e.post("/v1/chat/completions", body, keyed("surrogate"))
			if res.StatusCode != 400 || !strings.Contains(string(out), api.CodeInvalidRequest) || !strings.Contains(string(out), "surrogate") {
				t.Fatalf("%s: %d %s", s, res.StatusCode, out)
			}
		}
		if n := e.primary.Stats().Requests; n != 0 {
			t.Fatalf("the provider saw %d requests", n)
		}
		if _, err := e.store.Get(context.Background(), "k:"+identity.KeyDigest("acme", "chat.completions", "surrogate")); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the key was stored: %v", err)
		}
	})
}

// Every answer that is not a success is JSON in the caller's protocol
// with x-should-retry: an unknown path, a known one with another method,
// a missing receipt; and an upstream redirect is a protocol violation,
// never passed through.
func TestEveryErrorIsInTheCallersShape(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		get := func(path string, anthropicHeaders bool) (*http.Response, []byte) {
			req, _ := http.NewRequest("GET", e.url+path, nil)
			if anthropicHeaders {
				req.Header.Set("x-api-key", keyAcme)
				req.Header.Set("anthropic-version", "2023-06-01")
			} else {
				req.Header.Set("Authorization", "Bearer "+keyAcme)
			}
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res, b
		}
		for _, c := range []struct {
			name, path string
			anthropic  bool
			status     int
			want       string
		}{
			{"unknown path", "/v1/nothing-here", false, 404, `"code":"not_found"`},
			{"unknown path, Anthropic", "/v1/nothing-here", true, 404, `"type":"not_found_error"`},
			{"wrong method", "/v1/chat/completions", false, 405, `"code":"method_not_allowed"`},
			{"missing receipt", "/v1/receipts/01a00000-0000-7000-8000-000000000000", false, 404, `"code":"receipt_not_found"`},
		} {
			res, body := get(c.path, c.anthropic)
			if res.StatusCode != c.status || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("x-should-retry") != "false" ||
				!strings.Contains(string(body), c.want) || !strings.Contains(string(body), `"message":"`) {
				t.Errorf("%s: %d %v %s", c.name, res.StatusCode, res.Header, body)
			}
		}
		// An OpenAI SDK user reads the code and the message.
		var apiErr *openai.Error
		client := e.openai(nil)
		err := client.Get(context.Background(), "/nothing-here", nil, nil)
		if !errors.As(err, &apiErr) || apiErr.Code != "not_found" || apiErr.Message == "" {
			t.Fatalf("the SDK's error: %v", err)
		}
	})
}

// A redirect from a provider is never passed through, followed or
// retried: one attempt, 502 upstream_protocol_violation, the receipt's
// attempt a protocol_violation whose error names the status and the
// Location (without its query, which may carry a token). A 307 or 308
// once went to net/http's redirect handling, whose resend the no-resend
// guard refused: a send failure, retried until the budget ran out.
func TestAProviderRedirectIsOneAttemptAndAViolation(t *testing.T) {
	t.Parallel()
	var status, calls atomic.Int32
	front := func(m http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/chat/completions" {
				m.ServeHTTP(w, r) // a followed redirect would land here
				return
			}
			calls.Add(1)
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("Location", "https://moved.example/v1/chat/completions?key=sk-leaked-in-query")
			w.WriteHeader(int(status.Load()))
		})
	}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, front: front}, func(t *testing.T, e *env) {
		for _, st := range []int{307, 308, 301, 302, 303} {
			status.Store(int32(st))
			calls.Store(0)
			res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
			want := fmt.Sprintf(`HTTP %d %s to "https://moved.example/v1/chat/completions"`, st, http.StatusText(st))
			var eb errorBody
			_ = json.Unmarshal(body, &eb)
			if res.StatusCode != 502 || eb.Error.Code == nil || *eb.Error.Code != api.CodeProtocolViolation || res.Header.Get("x-should-retry") != "false" ||
				!strings.Contains(eb.Error.Message, want) || strings.Contains(string(body), "sk-leaked") {
				t.Fatalf("%d: %d %v %s", st, res.StatusCode, res.Header, body)
			}
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if n := calls.Load(); n != 1 || len(r.Attempts) != 1 || e.fallback.Stats().Requests != 0 {
				t.Fatalf("%d: %d upstream calls, %d attempts in the receipt; want one", st, n, len(r.Attempts))
			}
			a := r.Attempts[0]
			if a.Kind != string(gw.KindProtocolViolation) || r.Reason != "non_retryable" || a.Error == nil || !strings.Contains(a.Error.Message, want) {
				t.Fatalf("%d: attempt %s (%+v), reason %s", st, a.Kind, a.Error, r.Reason)
			}
		}
	})
}

// "No route can serve this request" says why, route by route; an outage
// of 429s says so.
func TestRefusalsSayWhy(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		res, body := e.post("/v1/chat/completions", `{"model":"solo","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), "primary: ") || res.Header.Get("X-Oncegate-Request-Id") == "" {
			t.Fatalf("an image on a text-only alias: %d %s", res.StatusCode, body)
		}
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 429})))
		res, body = e.post("/v1/chat/completions", chatBody("solo", false), nil)
		if res.StatusCode != 503 || !strings.Contains(string(body), "429") {
			t.Fatalf("every attempt rate limited: %d %s", res.StatusCode, body)
		}
	})
}

// A provider that takes the request, stays silent and then closes the
// connection was silent: the request moves to the next route at once,
// rather than trying the silent one again as after a reset.
func TestSilenceThenCloseMovesToTheNextRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultSilentClose, DelayMS: 300})))
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 2 || r.Attempts[0].Route != "primary" || r.Attempts[0].Cause != string(gw.CauseFirstByteTimeout) ||
			r.Attempts[1].Route != "fallback" {
			t.Fatalf("attempts: %+v", r.Attempts)
		}
		// A reset at once is a reset: the same route is tried again.
		e.primary.Reset()
		e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultReset})))
		res, _ = e.post("/v1/chat/completions", distinctBody("chat", 1, ""), nil)
		if r := e.receipt(res.Header.Get("X-Oncegate-Request-Id")); len(r.Attempts) != 2 || r.Attempts[1].Route != "primary" {
			t.Fatalf("after a reset: %+v", r.Attempts)
		}
	})
}

// A route whose account the provider refuses — a revoked key, an unpaid
// quota — is a route failure, not a request failure: the request moves to
// the next route at once (nothing was generated), the official SDK at its
// defaults reads the fallback's answer, exactly one call reached each
// provider, and the receipt and the metrics name the refusal as its own
// kind.
func TestARefusedAccountFailsOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault mock.Fault
		cause gw.Cause
	}{
		{"revoked key", mock.Fault{Type: mock.FaultStatus, Status: 401, ErrorType: "invalid_request_error", ErrorCode: "invalid_api_key",
			Message: "Incorrect API key provided: " + primaryProviderKey}, gw.CauseUpstreamAuth},
		{"forbidden", mock.Fault{Type: mock.FaultStatus, Status: 403, ErrorType: "permission_error", Message: "project suspended"}, gw.CauseUpstreamAuth},
		{"quota", mock.Fault{Type: mock.FaultQuota}, gw.CauseQuota},
		{"billing", mock.Fault{Type: mock.FaultStatus, Status: 400, ErrorType: "invalid_request_error",
			Message: "Your credit balance is too low to access the Anthropic API."}, gw.CauseQuota},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
				e.primary.SetScript(rules(always(tc.fault)))
				var h http.Header
				c := e.openai(&h)
				res, err := c.Chat.Completions.New(context.Background(), oaParams("chat", "hello"))
				if err != nil || res.Choices[0].Message.Content != answer(t, provider.OpenAI, "hello", 4) {
					t.Fatalf("the fallback's answer: %v %v", res, err)
				}
				id := h.Get("X-Oncegate-Request-Id")
				r := e.receipt(id)
				if len(r.Attempts) != 2 || r.Attempts[0].Kind != string(gw.KindAccountRefused) || r.Attempts[0].Cause != string(tc.cause) ||
					r.Attempts[1].Route != "fallback" || r.Attempts[1].Purpose != "fallback" || r.Terminal != "succeeded" {
					t.Fatalf("receipt %+v", r.Attempts)
				}
				if b, _ := json.Marshal(r); strings.Contains(string(b), primaryProviderKey) {
					t.Fatalf("the receipt keeps the provider's text: %s", b)
				}
				if p, f, _ := e.upstreamCalls(id); p.Requests != 1 || f.Requests != 1 {
					t.Fatalf("upstream calls: primary %d, fallback %d", p.Requests, f.Requests)
				}
				if m := string(e.metricsText()); !strings.Contains(m, `oncegate_attempts_total{class="retryable",kind="account_refused",route="primary"} 1`) {
					t.Fatalf("/metrics does not count the refusal as its kind:\n%s", m)
				}
			})
		})
	}
}

// The gateway's own provider credential refused is no fault of the
// tenant: 502 upstream_auth_failed, never the provider's text (it may
// echo the key) in the answer or the receipt, and the route counts as
// failing. Any other provider text that is kept has every configured
// secret scrubbed.
func TestTheGatewaysCredentialRefused(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 401, ErrorType: "invalid_request_error",
			ErrorCode: "invalid_api_key", Message: "Incorrect API key provided: " + primaryProviderKey})))
		res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
		if res.StatusCode != 502 || !strings.Contains(string(body), api.CodeUpstreamAuthFailed) || res.Header.Get("x-should-retry") != "false" ||
			strings.Contains(string(body), primaryProviderKey) || strings.Contains(string(body), "Incorrect API key") {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		if b, _ := json.Marshal(r); len(r.Attempts) != 1 || strings.Contains(string(b), primaryProviderKey) || strings.Contains(string(b), "Incorrect API key") {
			t.Fatalf("the receipt keeps the provider's text: %s", b)
		}
		if breaker.OutcomeOf(gw.KindAccountRefused) != breaker.Failure {
			t.Fatal("a refused credential does not count against its route")
		}
		// A 400 whose text echoes a configured secret is passed through
		// scrubbed.
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 400, Message: "bad request from key " + primaryProviderKey})))
		res, body = e.post("/v1/chat/completions", distinctBody("solo", 1, ""), nil)
		if res.StatusCode != 400 || strings.Contains(string(body), primaryProviderKey) || !strings.Contains(string(body), "[redacted]") {
			t.Fatalf("a provider text echoing a secret: %d %s", res.StatusCode, body)
		}
		// So is one echoing it cut short, upper-cased or encoded, in its
		// message or code, and the receipt keeps none of it.
		for i, echo := range []string{primaryProviderKey[:10], strings.ToUpper(primaryProviderKey), primaryProviderKey[4:],
			base64.StdEncoding.EncodeToString([]byte(primaryProviderKey)), hex.EncodeToString([]byte(primaryProviderKey))} {
			e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 400, ErrorCode: "key_" + echo, Message: "bad request from key " + echo})))
			res, body = e.post("/v1/chat/completions", distinctBody("solo", 2+i, ""), nil)
			var eb errorBody
			_ = json.Unmarshal(body, &eb)
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			kept := r.Attempts[0].Error
			if res.StatusCode != 400 || kept == nil || !strings.Contains(eb.Error.Message, "[redacted]") || !strings.Contains(kept.Message, "[redacted]") {
				t.Fatalf("a provider text echoing %q: %d %s; kept %+v", echo, res.StatusCode, body, kept)
			}
			code := ""
			if eb.Error.Code != nil {
				code = *eb.Error.Code
			}
			for _, text := range []string{eb.Error.Message, code, kept.Message, kept.Code} {
				if s := scrubtest.Survivor(primaryProviderKey, text); s != "" {
					t.Fatalf("a provider text echoing %q: %q survives in %q", echo, s, text)
				}
			}
		}
	})
}

// A field the other protocol cannot carry keeps the request on routes of
// the client's own protocol: the others are skipped with the reason in
// the receipt, and when none is left the 400 names the field.
func TestFieldsThatCannotBeTranslatedStayOnTheirProtocol(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		res, body := e.post("/v1/chat/completions", `{"model":"to-claude","seed":7,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		id := res.Header.Get("X-Oncegate-Request-Id")
		_, f, a := e.upstreamCalls(id)
		r := e.receipt(id)
		if a.Requests != 0 || f.Requests != 1 || len(r.Attempts) != 1 || r.Attempts[0].Route != "fallback" ||
			!strings.Contains(r.Request.IneligibleRoutes["claude"], "seed") {
			t.Fatalf("claude %+v fallback %+v receipt %+v %v", a, f, r.Attempts, r.Request.IneligibleRoutes)
		}
		// The same request without the seed goes to claude first.
		res, body = e.post("/v1/chat/completions", `{"model":"to-claude","seed":null,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Route") != "claude" {
			t.Fatalf("%d %s %v", res.StatusCode, body, res.Header)
		}
		res, body = e.post("/v1/chat/completions", `{"model":"claude","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"hi"}]}`, nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), "response_format cannot be carried to the anthropic protocol") {
			t.Fatalf("json_object on an Anthropic-only alias: %d %s", res.StatusCode, body)
		}
		res, body = e.post("/v1/messages", `{"model":"solo","max_tokens":50,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, nil)
		if res.StatusCode != 400 || !strings.Contains(string(body), "thinking cannot be carried to the openai protocol") {
			t.Fatalf("thinking on an OpenAI-only alias: %d %s", res.StatusCode, body)
		}
		if n := e.primary.Stats().Requests + e.anthropic.Stats().Requests; n != 1 {
			t.Fatalf("the refused requests reached a provider: %d upstream calls in all, want the one to claude", n)
		}
	})
}

// The answers net/http writes before any handler runs are JSON in the
// caller's protocol too: a control byte in Idempotency-Key (which no SDK
// can send, so a raw connection sends it) gets a 400 an SDK can read.
func TestNetHTTPsOwnRejectionsAreInTheCallersShape(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		for _, tc := range []struct{ path, want string }{
			{"/v1/chat/completions", `{"error":{`},
			{"/v1/messages", `{"type":"error","error":{`},
		} {
			conn, err := e.mem.DialContext(context.Background(), "tcp", "gateway.test:80")
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				_, _ = conn.Write([]byte("POST " + tc.path + " HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer " + keyAcme +
					"\r\nIdempotency-Key: ab\x01cd\r\nContent-Length: 2\r\n\r\n{}"))
			}()
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			conn.Close()
			if res.StatusCode != 400 || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("x-should-retry") != "false" ||
				!strings.HasPrefix(string(body), tc.want) || !strings.Contains(string(body), "control character") {
				t.Fatalf("%s: %d %v\n%s", tc.path, res.StatusCode, res.Header, body)
			}
		}
		if n := e.primary.Stats().Requests + e.anthropic.Stats().Requests; n != 0 {
			t.Fatalf("%d upstream calls", n)
		}
	})
}
