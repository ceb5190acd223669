package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
)

// Provider faults the gateway must read as what they are (docs/retries.md,
// docs/providers.md): a route whose model or deployment does not exist, a
// Bedrock frame that fails its CRC, a field one route type cannot carry,
// and Google's RetryInfo delay.

// missing scripts a mock's model as one its provider does not have.
func missing(model string) mock.Script {
	return rules(mock.Rule{Model: model, Fault: mock.Fault{Type: mock.FaultModelNotFound}})
}

// providerTexts are what the providers say of a missing model: none of it
// may reach a client.
var providerTexts = []string{"does not exist", "DeploymentNotFound", "model identifier is invalid", "is not found for API version",
	"was not found or your project", "not_found_error", "model_not_found"}

// noProviderText fails if body holds a provider's own words for a
// missing model.
func noProviderText(t *testing.T, body string) {
	t.Helper()
	for _, s := range providerTexts {
		if strings.Contains(body, s) {
			t.Fatalf("the provider's text %q reached the client: %s", s, body)
		}
	}
}

// moreGoogleAliases adds, to googleConfig, an alias with a healthy
// fallback and one alone for each route a test breaks.
const moreGoogleAliases = `  - {name: vertex-gemini-then-gemini, routes: [vertex-gemini, gemini], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: vertex-claude-then-gemini, routes: [vertex-claude, gemini], retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: azure-solo, routes: [azure], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: openai-solo, routes: [openai], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
  - {name: bedrock-solo, routes: [claude-bedrock], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}}
`

// TestAMissingModelFailsOverOnEveryCloud: on each provider type, a primary
// route whose model or deployment does not exist — answered in that
// provider's own shape — is route_unavailable: the healthy fallback
// serves at once, in one call each, JSON and streamed, through the
// official OpenAI SDK; and with no route left the client gets the
// gateway's own 502, never the provider's text. Not parallel: the AWS
// credentials come from the environment.
func TestAMissingModelFailsOverOnEveryCloud(t *testing.T) {
	awsEnv(t, mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey)
	g := newGoogleEnvWith(t, 6, moreGoogleAliases)
	ctx := context.Background()
	for _, tc := range []struct {
		cloud, alias, solo   string
		route, model         string // the broken route and its model
		fallback, fallbackTo string // the route that serves and its model
	}{
		{"azure-openai", "azure-then-gemini", "azure-solo", "azure", "gpt-deployment", "gemini", "gemini-2.5-flash"},
		{"openai", "openai-then-gemini", "openai-solo", "openai", "gpt-openai", "gemini", "gemini-2.5-flash"},
		{"gemini", "gemini-or-openai", "gemini", "gemini", "gemini-2.5-flash", "openai", "gpt-openai"},
		{"vertex google", "vertex-gemini-then-gemini", "vertex-gemini", "vertex-gemini", "gemini-2.5-pro", "gemini", "gemini-2.5-flash"},
		{"vertex anthropic", "vertex-claude-then-gemini", "vertex-claude", "vertex-claude", "claude-sonnet-vertex", "gemini", "gemini-2.5-flash"},
		{"bedrock", "bedrock-then-vertex", "bedrock-solo", "claude-bedrock", "bedrock-claude", "vertex-claude", "claude-sonnet-vertex"},
	} {
		t.Run(tc.cloud, func(t *testing.T) {
			g.mock.SetScript(missing(tc.model))
			for _, stream := range []bool{false, true} {
				g.mock.Reset()
				var h http.Header
				oc := g.openai(&h)
				var text string
				if stream {
					st := oc.Chat.Completions.NewStreaming(ctx, oaParams(tc.alias, "hello"), oopt("X-Oncegate-Join", "off"))
					var acc openai.ChatCompletionAccumulator
					for st.Next() {
						acc.AddChunk(st.Current())
					}
					if err := st.Err(); err != nil {
						t.Fatalf("stream: %v", err)
					}
					text = acc.Choices[0].Message.Content
				} else {
					res, err := oc.Chat.Completions.New(ctx, oaParams(tc.alias, "hello"), oopt("X-Oncegate-Join", "off"))
					if err != nil {
						t.Fatalf("json: %v", err)
					}
					text = res.Choices[0].Message.Content
				}
				if text == "" || h.Get("X-Oncegate-Route") != tc.fallback {
					t.Fatalf("stream %v: %q from %q, want the answer from %s", stream, text, h.Get("X-Oncegate-Route"), tc.fallback)
				}
				r := g.receipt(h.Get("X-Oncegate-Request-Id"))
				if len(r.Attempts) != 2 || r.Attempts[0].Route != tc.route || r.Attempts[0].Kind != string(gw.KindRouteUnavailable) ||
					r.Attempts[0].OutcomeClass != string(gw.ClassRetryable) || r.Attempts[1].Route != tc.fallback ||
					r.Attempts[1].Purpose != "fallback" || r.Attempts[1].Kind != "ok" || r.Terminal != "succeeded" {
					t.Fatalf("stream %v: attempts %+v, terminal %s", stream, r.Attempts, r.Terminal)
				}
				if b, f := g.calls(tc.model), g.calls(tc.fallbackTo); b != 1 || f != 1 {
					t.Fatalf("stream %v: %d calls to the broken route, %d to the fallback; want 1 and 1", stream, b, f)
				}
			}
			// No route left: the gateway's own error, never the provider's.
			g.mock.Reset()
			res, body := g.post("/v1/chat/completions", chatBody(tc.solo, false), nil)
			var eb errorBody
			_ = json.Unmarshal(body, &eb)
			if res.StatusCode != 502 || eb.Error.Code == nil || *eb.Error.Code != api.CodeRouteUnavailable || res.Header.Get("x-should-retry") != "false" ||
				!strings.Contains(eb.Error.Message, "route "+tc.route) || eb.Oncegate.Terminal != "exhausted" {
				t.Fatalf("no route left: %d %s", res.StatusCode, body)
			}
			noProviderText(t, string(body))
			if n := g.calls(tc.model); n != 1 {
				t.Fatalf("no route left: %d calls to the broken route, want 1 (never the same route again)", n)
			}
		})
	}
}

// TestAMissingAnthropicModelFailsOver: the Anthropic type's 404
// not_found_error through the official Anthropic SDK; the refusals count
// against the route's breaker, which opens and keeps the next request
// off the route; a weighted tier answers every request though one of its
// members is broken; and with no route left, each protocol gets the
// gateway's own error.
func TestAMissingAnthropicModelFailsOver(t *testing.T) {
	t.Parallel()
	breakerYAML := "breaker: {failure_ratio: 0.5, min_requests: 2, window: 10s, open_for: 30s, half_open_probes: 1}\n"
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: breakerYAML}, func(t *testing.T, e *env) {
		e.anthropic.SetScript(missing("claude-model"))
		ctx := context.Background()
		params := anthropic.MessageNewParams{Model: "to-claude", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
		for i := range 2 {
			var h http.Header
			ac := e.anthropicClient(&h)
			params.Messages[0] = anthropic.NewUserMessage(anthropic.NewTextBlock("hello " + string(rune('a'+i))))
			msg, err := ac.Messages.New(ctx, params)
			if err != nil || len(msg.Content) == 0 || msg.Content[0].Text == "" || h.Get("X-Oncegate-Route") != "fallback" {
				t.Fatalf("request %d: %+v %v", i, msg, err)
			}
			id := h.Get("X-Oncegate-Request-Id")
			r := e.receipt(id)
			if len(r.Attempts) != 2 || r.Attempts[0].Kind != string(gw.KindRouteUnavailable) || r.Attempts[1].Route != "fallback" {
				t.Fatalf("request %d: attempts %+v", i, r.Attempts)
			}
			if _, f, a := e.upstreamCalls(id); a.Requests != 1 || f.Requests != 1 {
				t.Fatalf("request %d: claude %d calls, fallback %d; want 1 and 1", i, a.Requests, f.Requests)
			}
		}
		// Two failures in two requests: claude's breaker is open, so the
		// next request goes straight to the fallback.
		var h http.Header
		params.Messages[0] = anthropic.NewUserMessage(anthropic.NewTextBlock("hello c"))
		ac := e.anthropicClient(&h)
		if _, err := ac.Messages.New(ctx, params); err != nil {
			t.Fatal(err)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 1 || r.Attempts[0].Route != "fallback" || e.anthropic.Stats().Requests != 2 {
			t.Fatalf("with claude's breaker open: attempts %+v, claude saw %d requests", r.Attempts, e.anthropic.Stats().Requests)
		}
		if m := string(e.metricsText()); !strings.Contains(m, `oncegate_attempts_total{class="retryable",kind="route_unavailable",route="claude"} 2`) ||
			!strings.Contains(m, `oncegate_breaker_state{route="claude"} 2`) {
			t.Fatalf("/metrics does not count the broken route:\n%s", m)
		}

		// A weighted tier with one broken member answers every request.
		e.primary.SetScript(missing("east-model"))
		drawn := 0
		for i := range 12 {
			res, body := e.post("/v1/chat/completions", distinctBody("spread", i, ""), nil)
			if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Route") != "west" {
				t.Fatalf("spread %d: %d %s", i, res.StatusCode, body)
			}
			r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
			if r.Attempts[0].Route == "east" {
				drawn++
				if len(r.Attempts) != 2 || r.Attempts[0].Kind != string(gw.KindRouteUnavailable) || r.Attempts[1].Route != "west" {
					t.Fatalf("spread %d: attempts %+v", i, r.Attempts)
				}
			}
		}
		if s := e.primary.Stats().ByModel; drawn == 0 || s["east-model"].Requests != int64(drawn) || e.fallback.Stats().ByModel["west-model"].Requests != 12 {
			t.Fatalf("east drawn %d times, called %d; west called %d of 12", drawn, s["east-model"].Requests, e.fallback.Stats().ByModel["west-model"].Requests)
		}

		// No route left, in either protocol: the gateway's own 502.
		e.primary.SetScript(missing("primary-model"))
		res, body := e.post("/v1/chat/completions", chatBody("solo", false), nil)
		if res.StatusCode != 502 || !strings.Contains(string(body), `"code":"`+api.CodeRouteUnavailable+`"`) || res.Header.Get("x-should-retry") != "false" {
			t.Fatalf("openai, no route left: %d %s", res.StatusCode, body)
		}
		noProviderText(t, string(body))
		ac = e.anthropicClient(nil)
		_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "solo", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 502 || !strings.Contains(ae.RawJSON(), `"type":"api_error"`) ||
			!strings.Contains(ae.RawJSON(), api.CodeRouteUnavailable) || e.primary.Stats().ByModel["primary-model"].Requests != 2 {
			t.Fatalf("anthropic, no route left: %v, %d calls", err, e.primary.Stats().ByModel["primary-model"].Requests)
		}
		noProviderText(t, ae.RawJSON())
	})
}

// TestAnObjectTheRequestNamesIsNotTheRoutes: a 404 that names a
// parameter of the request (OpenAI's previous_response_id) is the
// request's, not the route's: rejected and passed on, never failed over.
func TestAnObjectTheRequestNamesIsNotTheRoutes(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 404, ErrorType: "invalid_request_error",
			ErrorCode: "previous_response_not_found", Message: "Previous response with id 'resp_abc' not found."})))
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		id := res.Header.Get("X-Oncegate-Request-Id")
		p, f, _ := e.upstreamCalls(id)
		if res.StatusCode != 404 || p.Requests != 1 || f.Requests != 0 || e.receipt(id).Attempts[0].Kind != string(gw.KindRejected) {
			t.Fatalf("%d %s; primary %d, fallback %d", res.StatusCode, body, p.Requests, f.Requests)
		}
	})
}

// bedrockStopAlias streams claude with after_output: stop.
const bedrockStopAlias = `  - name: claude-stop
    routes: [claude-bedrock, claude]
    stream: {after_output: stop}
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
`

// TestABedrockFrameThatFailsItsCRCBreaksTheStream: a ConverseStream frame
// that fails its message or prelude CRC is a broken stream, never a
// skipped event whose text the client silently misses. Before visible
// output the request fails over and the client reads the whole answer;
// after it, stream.after_output: stop ends the stream with an in-band
// error — not a 200 stop with text missing. Not parallel: the AWS
// credentials come from the environment.
func TestABedrockFrameThatFailsItsCRCBreaksTheStream(t *testing.T) {
	b := newBedrockEnvWith(t, mock.Config{}, mock.DefaultAWS.SecretAccessKey, bedrockStopAlias)
	want := answer(t, provider.OpenAI, "Tell me a story.", 24)
	ctx := context.Background()
	for _, crc := range []string{"message", "prelude"} {
		b.bedrock.SetScript(rules(always(mock.Fault{Type: mock.FaultBadCRCAfter, After: 0, ErrorType: crc})))
		b.bedrock.Reset()
		b.anthropic.Reset()
		var h http.Header
		oc := b.openai(&h)
		st := oc.Chat.Completions.NewStreaming(ctx, oaParams("claude", "Tell me a story."), oopt("X-Oncegate-Join", "off"))
		var acc openai.ChatCompletionAccumulator
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if err := st.Err(); err != nil || acc.Choices[0].Message.Content != want {
			t.Fatalf("%s CRC before output: %q, %v; want %q", crc, acc.Choices[0].Message.Content, err, want)
		}
		r := b.receipt(h.Get("X-Oncegate-Request-Id"))
		last := r.Attempts[len(r.Attempts)-1]
		if len(r.Attempts) != 3 || r.Attempts[0].Kind != string(gw.KindUnavailable) || r.Attempts[0].VisibleOutput ||
			r.Attempts[0].ProtocolWarnings != 0 || last.Route != "claude" || last.Kind != "ok" {
			t.Fatalf("%s CRC before output: attempts %+v", crc, r.Attempts)
		}
		if e := r.Attempts[0].Error; e == nil || !strings.Contains(e.Message, "checksum mismatch") {
			t.Fatalf("%s CRC before output: the receipt does not say why the stream broke: %+v", crc, e)
		}
		if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 2 || na != 1 {
			t.Fatalf("%s CRC before output: Bedrock %d calls, Anthropic %d; want 2 and 1", crc, nb, na)
		}
	}

	// After three visible tokens, with after_output: stop.
	b.bedrock.SetScript(rules(always(mock.Fault{Type: mock.FaultBadCRCAfter, After: 3})))
	b.bedrock.Reset()
	b.anthropic.Reset()
	var h http.Header
	oc := b.openai(&h)
	st := oc.Chat.Completions.NewStreaming(ctx, oaParams("claude-stop", "Tell me a story."), oopt("X-Oncegate-Join", "off"))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	err := st.Err()
	if err == nil || !strings.Contains(err.Error(), "stream_interrupted") {
		t.Fatalf("after output: no in-band interruption (%v); the client read %q", err, acc.Choices[0].Message.Content)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if len(r.Attempts) != 1 || r.Attempts[0].Kind != string(gw.KindStreamInterruptedAfterOutput) || r.Attempts[0].EmittedTokens != 3 ||
		r.Terminal != "indeterminate" || b.anthropic.Stats().Requests != 0 {
		t.Fatalf("after output: attempts %+v, terminal %s", r.Attempts, r.Terminal)
	}
}

// toolTurns is a conversation that already called a tool, asked again
// with tool_choice none.
func toolTurns(model string) openai.ChatCompletionNewParams {
	tool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	call := openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
		Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	return openai.ChatCompletionNewParams{Model: model, Tools: []openai.ChatCompletionToolUnionParam{tool},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?"),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{call}}},
			openai.ToolMessage("18C and sunny", "call_1"), openai.UserMessage("Thanks. Now just say hello.")}}
}

// TestToolChoiceNoneGoesWhereItCanBeCarried: Converse has no "none" and
// wants its tools whenever the history holds tool calls, so tool_choice
// none after a tool call cannot be carried to a bedrock route: the route
// is skipped before dispatch and the Anthropic route serves; with only
// bedrock, the 400 names the field. Not parallel: the AWS credentials
// come from the environment.
func TestToolChoiceNoneGoesWhereItCanBeCarried(t *testing.T) {
	b := newBedrockEnv(t, mock.Config{}, mock.DefaultAWS.SecretAccessKey)
	ctx := context.Background()
	var h http.Header
	oc := b.openai(&h)
	res, err := oc.Chat.Completions.New(ctx, toolTurns("claude"))
	if err != nil || res.Choices[0].Message.Content == "" || h.Get("X-Oncegate-Route") != "claude" {
		t.Fatalf("[bedrock, anthropic]: %v %v", res, err)
	}
	if nb, na := b.bedrock.Stats().Requests, b.anthropic.Stats().Requests; nb != 0 || na != 1 {
		t.Fatalf("Bedrock %d calls, Anthropic %d; want 0 and 1", nb, na)
	}
	r := b.receipt(h.Get("X-Oncegate-Request-Id"))
	if why := r.Request.IneligibleRoutes["claude-bedrock"]; !strings.Contains(why, "tool_choice") {
		t.Fatalf("ineligible routes %v", r.Request.IneligibleRoutes)
	}
	_, err = oc.Chat.Completions.New(ctx, toolTurns("bedrock-only"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || !strings.Contains(oe.Message, "tool_choice") || b.bedrock.Stats().Requests != 0 {
		t.Fatalf("bedrock only: %v (Bedrock %d calls)", err, b.bedrock.Stats().Requests)
	}
}

// geminiConfig is one Gemini route, on the primary mock, whose alias caps
// a provider's hint at 5 s.
const geminiConfig = `
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - {id: gemini, type: gemini, base_url: "PRIMARY", api_key_env: KEY_UPSTREAM_ONE, timeouts: {connect: 1s, first_byte: 2s, idle: 2s}}
routes:
  - {id: gemini, provider: gemini, model: gemini-2.5-flash, capabilities: {input: [text], streaming: true, max_context_tokens: 1000000, max_output_tokens: 1000}, behavior_class: chat-v1, data_boundary: external, max_attempts: 3, price: {input_usd_per_mtok: 0.3, output_usd_per_mtok: 2.5}}
models:
  - {name: gemini, routes: [gemini], retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 5s, jitter: none, deadline: 60s}}
`

// TestGooglesRetryInfoCountsAsRetryAfter: a Gemini 429 names its wait in
// the body's RetryInfo.retryDelay, not in a header. The hint counts as
// Retry-After does — the next attempt's not_before is at least that long
// after the 429 was observed, capped by retry_after_cap — and a malformed
// one is ignored. Times are the receipt's, on the bubble's fake clock.
func TestGooglesRetryInfoCountsAsRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		delay string
		want  time.Duration // the least wait before the retry
		hint  int64         // retry_after_ms in the receipt; -1: none
	}{
		{"2s", 2 * time.Second, 2000},
		{"0.750s", 750 * time.Millisecond, 750},
		{"20s", 5 * time.Second, 20000}, // capped by retry_after_cap
		{"2 s", 20 * time.Millisecond, -1},
		{"-2s", 20 * time.Millisecond, -1},
	} {
		t.Run(tc.delay, func(t *testing.T) {
			t.Parallel()
			pcfg := mock.Config{Tokens: 4, GeminiAPIKey: primaryProviderKey}
			inBubble(t, envOptions{primary: &pcfg, config: geminiConfig}, func(t *testing.T, e *env) {
				e.primary.SetScript(rules(first(1, mock.Fault{Type: mock.FaultStatus, Status: 429, RetryDelay: tc.delay})))
				res, body := e.post("/v1/chat/completions", chatBody("gemini", false), nil)
				if res.StatusCode != 200 {
					t.Fatalf("%d %s", res.StatusCode, body)
				}
				r := e.receipt(res.Header.Get("X-Oncegate-Request-Id"))
				if len(r.Attempts) != 2 || r.Attempts[0].Kind != string(gw.KindRateLimited) || r.Attempts[1].Purpose != "retry" {
					t.Fatalf("attempts %+v", r.Attempts)
				}
				wait := r.Attempts[1].NotBefore.Sub(r.Attempts[0].ObservedAt)
				if wait < tc.want || wait >= tc.want+time.Second/10 {
					t.Fatalf("the retry was scheduled %v after the 429; want %v", wait, tc.want)
				}
				if started := r.Attempts[1].StartedAt; started.Before(r.Attempts[1].NotBefore) {
					t.Fatalf("the retry started %v, before its not_before %v", started, r.Attempts[1].NotBefore)
				}
				got := int64(-1)
				if h := r.Attempts[0].RetryAfterMS; h != nil {
					got = *h
				}
				if got != tc.hint {
					t.Fatalf("retry_after_ms %d, want %d", got, tc.hint)
				}
				if n := e.primary.Stats().Requests; n != 2 {
					t.Fatalf("%d upstream calls, want 2", n)
				}
			})
		})
	}
}
