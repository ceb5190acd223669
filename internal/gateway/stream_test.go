package gateway

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

const streamTokens = 30

// streamOpenAI runs a streamed completion with the official SDK at default
// settings and returns the accumulated text, the stream's error and the
// response headers.
func (e *env) streamOpenAI(model, prompt string) (string, openai.ChatCompletionAccumulator, http.Header, error) {
	var h http.Header
	c := e.openai(&h)
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: model, Messages: userMsg(prompt),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			e.t.Fatalf("the SDK accumulator rejected a chunk: %+v", st.Current())
		}
	}
	text := ""
	if len(acc.Choices) > 0 {
		text = acc.Choices[0].Message.Content
	}
	return text, acc, h, st.Err()
}

// streamAnthropic runs a streamed message with the official Anthropic SDK
// at default settings and returns the accumulated message and the
// response headers; a stream error fails the test.
func (e *env) streamAnthropic(params anthropic.MessageNewParams) (anthropic.Message, http.Header) {
	e.t.Helper()
	var h http.Header
	c := e.anthropicClient(&h)
	st := c.Messages.NewStreaming(context.Background(), params)
	var msg anthropic.Message
	for st.Next() {
		if err := msg.Accumulate(st.Current()); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		e.t.Fatal(err)
	}
	return msg, h
}

// rawStream posts a streamed request and returns the whole SSE body.
func (e *env) rawStream(model string, headers map[string]string) (*http.Response, string) {
	res, body := e.post("/v1/chat/completions", chatBody(model, true), headers)
	return res, string(body)
}

const prompt = "What is a logical request?"

func TestPreOutputFailoverIsInvisible(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		text, _, h, err := e.streamOpenAI("chat", prompt)
		if err != nil {
			t.Fatal(err)
		}
		if want := answer(t, provider.OpenAI, prompt, streamTokens); text != want {
			t.Fatalf("client read\n%q\nwant one clean generation\n%q", text, want)
		}
		id := h.Get("X-Oncegate-Request-Id")
		p, f, _ := e.upstreamCalls(id)
		r := e.receipt(id)
		if p.Requests != 3 || f.Requests != 1 || len(r.Attempts) != 4 || h.Get("X-Oncegate-Route") != "fallback" || h.Get("X-Oncegate-Attempts") != "4" {
			t.Fatalf("primary %d fallback %d attempts %d headers %v", p.Requests, f.Requests, len(r.Attempts), h)
		}
		if f.Generations != 1 || r.Totals.BillableTokens != f.Billable() {
			t.Fatalf("billed %d tokens, the fallback generated %d", r.Totals.BillableTokens, f.Billable())
		}
	})
}

func TestResumeAfterVisibleOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after int
	}{
		{"cut between words", 5},
		{"cut after a paragraph break: no doubled whitespace", 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
				e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: tc.after}}))
				text, acc, h, err := e.streamOpenAI("chat", prompt)
				if err != nil {
					t.Fatal(err)
				}
				if want := answer(t, provider.OpenAI, prompt, streamTokens); text != want {
					t.Fatalf("prefix + continuation =\n%q\nwant\n%q", text, want)
				}
				id := h.Get("X-Oncegate-Request-Id")
				p, f, _ := e.upstreamCalls(id)
				r := e.receipt(id)
				if p.Requests != 2 || p.Continuations != 1 || f.Requests != 0 {
					t.Fatalf("primary %+v fallback %+v", p, f)
				}
				a := r.Attempts
				if len(a) != 2 || a[0].Kind != "stream_interrupted_after_output" || a[0].EmittedTokens != int64(tc.after) || a[1].Purpose != "resume" || a[1].Route != "primary" {
					t.Fatalf("attempts %+v", a)
				}
				// Every attempt is billed, the upstream agrees, and the final
				// usage chunk reports the sum.
				if r.Totals.BillableTokens != p.Billable() || acc.Usage.TotalTokens != r.Totals.BillableTokens {
					t.Fatalf("receipt %d, mock %d, usage chunk %d", r.Totals.BillableTokens, p.Billable(), acc.Usage.TotalTokens)
				}
			})
		})
	}
}

func TestResumeWithTheAnthropicSDK(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.anthropic.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStallAfter, After: 7}}))
		msg, h := e.streamAnthropic(anthropic.MessageNewParams{Model: "claude", MaxTokens: 200,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		if want := answer(t, provider.Anthropic, prompt, streamTokens); len(msg.Content) != 1 || msg.Content[0].Text != want {
			t.Fatalf("read %+v\nwant %q", msg.Content, want)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 2 || r.Attempts[1].Purpose != "resume" || r.Terminal != "succeeded" {
			t.Fatalf("receipt %+v", r.Attempts)
		}
	})
}

func TestStopEndsTheStreamWithAnInBandError(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 5}}))
		text, _, h, err := e.streamOpenAI("chat-stop", prompt)
		if err == nil || !strings.Contains(err.Error(), "stream_interrupted") {
			t.Fatalf("the SDK must surface an error, got %v", err)
		}
		want := answer(t, provider.OpenAI, prompt, streamTokens)
		if !strings.HasPrefix(want, text) || len(text) == 0 {
			t.Fatalf("partial text %q is not a prefix of the answer", text)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 1 || r.Terminal != "indeterminate" || r.Attempts[0].Usage.OutputTokens != 5 {
			t.Fatalf("receipt %s %+v", r.Terminal, r.Attempts)
		}
		e.primary.Reset()
		e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 5}}))
		_, body := e.rawStream("chat-stop", nil)
		if strings.Contains(body, "[DONE]") || !strings.Contains(body, `"emitted_tokens":5`) || !strings.Contains(body, `"code":"stream_interrupted"`) ||
			!strings.Contains(body, `"terminal":"indeterminate"`) {
			t.Fatalf("body must end in an in-band error without [DONE]:\n%s", body)
		}
	})
}

func TestRestartOnlyForOptedInClients(t *testing.T) {
	t.Parallel()
	script := rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 3}})
	for _, tc := range []struct {
		name    string
		headers map[string]string
		restart bool
	}{
		{"no headers", nil, false},
		{"accept-restart without stream events", map[string]string{"X-Oncegate-Accept-Restart": "1"}, false},
		{"both opt-in headers", map[string]string{"X-Oncegate-Accept-Restart": "1", "X-Oncegate-Stream-Events": "1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
				e.primary.SetScript(script)
				res, body := e.rawStream("chat-restart", tc.headers)
				r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
				restarted := strings.Contains(body, "event: oncegate.restart")
				if restarted != tc.restart {
					t.Fatalf("restart event %v, want %v:\n%s", restarted, tc.restart, body)
				}
				if tc.restart {
					if len(r.Attempts) != 2 || r.Attempts[1].Purpose != "restart" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
						t.Fatalf("receipt %+v body %s", r.Attempts, body)
					}
					return
				}
				if len(r.Attempts) != 1 || r.Terminal != "indeterminate" || strings.Contains(body, "[DONE]") || strings.Contains(body, "event: oncegate") {
					t.Fatalf("want stop without oncegate events: %s %+v\n%s", r.Terminal, r.Attempts, body)
				}
			})
		})
	}
}

func TestStallAfterOutputIsFinishedByTheNextRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStallAfter, After: 20}))) // silent for good
		text, acc, h, err := e.streamOpenAI("chat-pair", prompt)
		if err != nil {
			t.Fatalf("the client must read one seamless answer: %v", err)
		}
		if want := answer(t, provider.OpenAI, prompt, streamTokens); text != want {
			t.Fatalf("prefix + continuation =\n%q\nwant\n%q", text, want)
		}
		id := h.Get("X-Oncegate-Request-Id")
		p, f, a := e.upstreamCalls(id)
		if p.Requests != 1 || f.Requests != 0 || a.Requests != 1 || a.Continuations != 1 {
			t.Fatalf("primary %+v fallback %+v claude %+v: the stalled route is not asked again", p, f, a)
		}
		r := e.receipt(id)
		at := r.Attempts
		if len(at) != 2 || r.Terminal != "succeeded" || at[0].Kind != "stream_interrupted_after_output" || at[0].Cause != "stall" ||
			at[0].EmittedTokens != 20 || at[1].Route != "claude" || at[1].Purpose != "resume" || at[1].Kind != "ok" {
			t.Fatalf("receipt %s %+v", r.Terminal, at)
		}
		// At once: the continuation waits for nothing but the idle timeout
		// that detected the stall.
		if !at[1].NotBefore.Equal(at[0].ObservedAt) {
			t.Fatalf("continuation not before %v, the stall was observed at %v", at[1].NotBefore, at[0].ObservedAt)
		}
		if r.Totals.BillableTokens != p.Billable()+a.Billable() || acc.Usage.TotalTokens != r.Totals.BillableTokens {
			t.Fatalf("receipt %d, upstream %d, usage chunk %d", r.Totals.BillableTokens, p.Billable()+a.Billable(), acc.Usage.TotalTokens)
		}
	})
}

// After a continuation on another route the chunks name the model that
// serves them: the first route's before the break, the continuing route's
// after it — what the official SDK reads chunk by chunk.
func TestAContinuationsChunksNameItsModel(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStallAfter, After: 20})))
		var h http.Header
		c := e.openai(&h)
		st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "chat-pair", Messages: userMsg(prompt)})
		var models []string
		for st.Next() {
			if m := st.Current().Model; len(models) == 0 || models[len(models)-1] != m {
				models = append(models, m)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if want := []string{"primary-model", "claude-model"}; !slices.Equal(models, want) {
			t.Fatalf("the chunks name %q; want %q (the continuing route's model after the break)", models, want)
		}
	})
}

func TestResetAfterOutputTriesTheSameRouteOnceThenTheNext(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 6}))) // the continuation breaks too
		text, _, h, err := e.streamOpenAI("chat-pair", prompt)
		if err != nil || text != answer(t, provider.OpenAI, prompt, streamTokens) {
			t.Fatalf("%v %q", err, text)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := e.receipt(id)
		var routes []string
		for _, a := range r.Attempts {
			routes = append(routes, a.Route+"/"+a.Purpose)
		}
		if got := strings.Join(routes, " "); got != "primary/initial primary/resume claude/resume" || r.Terminal != "succeeded" {
			t.Fatalf("attempts %s, terminal %s", got, r.Terminal)
		}
		if p, _, a := e.upstreamCalls(id); p.Requests != 2 || p.Continuations != 1 || a.Requests != 1 || a.Continuations != 1 {
			t.Fatalf("primary %+v claude %+v", p, a)
		}
	})
}

func TestResumeRoutesSameKeepsTheContinuationOnItsRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 6})))
		_, _, h, err := e.streamOpenAI("chat-pair-same", prompt)
		if err == nil || !strings.Contains(err.Error(), "stream_interrupted") {
			t.Fatalf("want the interruption in-band, got %v", err)
		}
		id := h.Get("X-Oncegate-Request-Id")
		if p, _, a := e.upstreamCalls(id); p.Requests != 2 || a.Requests != 0 {
			t.Fatalf("primary %+v claude %+v: only the route that broke may continue", p, a)
		}
	})
}

func TestContinuationOnlyOnRoutesThatCanContinue(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))                 // first-byte timeout: on to the fallback
		e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 4}))) // no continuation on this route
		_, _, h, err := e.streamOpenAI("chat", prompt)
		if err == nil {
			t.Fatal("the stream must end in an error")
		}
		id := h.Get("X-Oncegate-Request-Id")
		p, f, _ := e.upstreamCalls(id)
		r := e.receipt(id)
		if p.Requests != 1 || f.Requests != 1 || len(r.Attempts) != 2 || r.Terminal != "indeterminate" {
			t.Fatalf("primary %d fallback %d attempts %+v", p.Requests, f.Requests, r.Attempts)
		}
	})
}

func TestRejectedContinuationEndsAsStop(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
		yes := true
		e.primary.SetScript(rules(
			mock.Rule{Continuation: &yes, Fault: mock.Fault{Type: mock.FaultRejectPrefill}},
			mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 6}},
		))
		res, body := e.rawStream("chat", nil)
		if strings.Contains(body, "[DONE]") || !strings.Contains(body, `"emitted_tokens":6`) || !strings.Contains(body, "stream broke after 6 tokens") {
			t.Fatalf("want the original interruption reported in-band:\n%s", body)
		}
		r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
		a := r.Attempts
		if len(a) != 2 || a[1].Purpose != "resume" || a[1].Kind != "rejected" || a[1].HTTPStatus != 400 || a[1].Error == nil ||
			!strings.Contains(a[1].Error.Message, "prefill") || r.Terminal != "indeterminate" {
			t.Fatalf("receipt %s %+v", r.Terminal, a)
		}
		if p, f, _ := e.upstreamCalls(r.RequestID); p.Requests != 2 || f.Requests != 0 {
			t.Fatalf("primary %d fallback %d: no other route may be tried", p.Requests, f.Requests)
		}
	})
}

func TestRelayRules(t *testing.T) {
	t.Parallel()
	want := func(t *testing.T) string { return answer(t, provider.OpenAI, prompt, streamTokens) }
	t.Run("a malformed chunk is skipped and counted", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultMalformedAfter, After: 3})))
			text, _, h, err := e.streamOpenAI("chat", prompt)
			if err != nil || text != want(t) {
				t.Fatalf("%v %q", err, text)
			}
			if r := e.receipt(h.Get("X-Oncegate-Request-Id")); r.Attempts[0].ProtocolWarnings != 1 || len(r.Attempts) != 1 {
				t.Fatalf("attempts %+v", r.Attempts)
			}
		})
	})
	t.Run("a finished stream without [DONE] is complete", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultNoDone})))
			res, body := e.rawStream("chat", nil)
			if !strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Fatalf("the gateway must send [DONE] itself:\n%s", body)
			}
			if r := e.receipt(res.Header.Get("X-Oncegate-Request-Id")); r.Terminal != "succeeded" || len(r.Attempts) != 1 {
				t.Fatalf("%s %+v", r.Terminal, r.Attempts)
			}
		})
	})
	t.Run("a stall after output resumes on the same route", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStallAfter, After: 9}}))
			text, _, h, err := e.streamOpenAI("chat", prompt)
			if err != nil || text != want(t) {
				t.Fatalf("%v %q", err, text)
			}
			if r := e.receipt(h.Get("X-Oncegate-Request-Id")); len(r.Attempts) != 2 || r.Attempts[1].Purpose != "resume" {
				t.Fatalf("attempts %+v", r.Attempts)
			}
		})
	})
	t.Run("the client sees the model that served", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: 5}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 500})))
			_, acc, _, err := e.streamOpenAI("chat", prompt)
			if err != nil || acc.Model != "fallback-model" {
				t.Fatalf("%v model %q", err, acc.Model)
			}
		})
	})
	t.Run("non-opt-in clients get comments, opt-in clients events", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
			e.primary.SetScript(rules(mock.Rule{Calls: []int{1, 3}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 5}}))
			_, body := e.rawStream("chat", nil)
			if !strings.Contains(body, ": oncegate resuming after_tokens=5\n") || strings.Contains(body, "event: oncegate") {
				t.Fatalf("want a comment only:\n%s", body)
			}
			_, body = e.rawStream("chat", map[string]string{"X-Oncegate-Stream-Events": "1"})
			if !strings.Contains(body, "event: oncegate.resuming\ndata: {\"after_tokens\":5,\"attempt\":2}\n") {
				t.Fatalf("want an oncegate.resuming event:\n%s", body)
			}
		})
	})
}

func TestBufferedStreamFailsOverLikeBeforeOutput(t *testing.T) {
	t.Parallel()
	for _, f := range []mock.Fault{{Type: mock.FaultDropAfter, After: 12}, {Type: mock.FaultStallAfter, After: 12}} {
		t.Run(f.Type, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: streamTokens}}, func(t *testing.T, e *env) {
				e.primary.SetScript(rules(always(f)))
				text, _, h, err := e.streamOpenAI("chat-buffered", prompt)
				if err != nil || text != answer(t, provider.OpenAI, prompt, streamTokens) {
					t.Fatalf("%v %q", err, text)
				}
				id := h.Get("X-Oncegate-Request-Id")
				r := e.receipt(id)
				p, fb, _ := e.upstreamCalls(id)
				if r.Attempts[0].VisibleOutput || r.Attempts[0].Kind == "stream_interrupted_after_output" || p.Continuations != 0 || fb.Requests != 1 {
					t.Fatalf("attempts %+v primary %+v", r.Attempts, p)
				}
				if r.Totals.BillableTokens != p.Billable()+fb.Billable() {
					t.Fatalf("billed %d, upstream generated %d", r.Totals.BillableTokens, p.Billable()+fb.Billable())
				}
			})
		})
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 200, TokenInterval: 20 * time.Millisecond}}, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", true)))
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		id := res.Header.Get("X-Oncegate-Request-Id")
		rd := bufio.NewReader(res.Body)
		for i := 0; i < 6; i++ { // read a few events, then hang up
			if _, err := rd.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		_ = res.Body.Close()
		deadline := time.Now().Add(2 * time.Second)
		for e.primary.Stats().ByRequestID[id].Disconnects == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the mock never saw the upstream call cancelled")
			}
			time.Sleep(10 * time.Millisecond)
		}
		var r *receipt.Receipt
		for r == nil || r.Terminal == "" {
			time.Sleep(10 * time.Millisecond)
			if got, err := e.gw.receipt(context.Background(), "acme", id); err == nil {
				r = got
			}
			if time.Now().After(deadline) {
				t.Fatal("no receipt for the cancelled request")
			}
		}
		if r.Terminal != string(gw.TerminalCancelled) || r.Attempts[0].Kind != "cancelled" || r.Attempts[0].Cause != "client_disconnected" {
			t.Fatalf("receipt %s %+v", r.Terminal, r.Attempts)
		}
		if p := e.primary.Stats().ByRequestID[id]; p.Requests != 1 || p.OutputTokens >= 200 {
			t.Fatalf("upstream %+v", p)
		}
	})
}
