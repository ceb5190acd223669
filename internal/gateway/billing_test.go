package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/coord"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Billing of streams that end without the provider's final usage
// (docs/streaming.md, "What a broken stream is billed"): whatever the
// provider type, client protocol and stream.after_output, a receipt never
// bills an attempt below the output its client was shown, and the
// tenant's and the key's spend, the spend report and the client's final
// usage all say what the receipt says.

// billingTypes are the provider types a stream can be served by, each a
// route of billingConfig named after it with a model of its own (so the
// mock's per-model counters are each route's); whether it continues a
// partial answer itself, and whether it serves /v1/responses turns.
var billingTypes = []struct {
	route     string
	model     string
	continues bool
	turns     bool
}{
	{"openai", "m-openai", true, true},
	{"anthropic", "m-anthropic", true, true},
	{"azure", "m-azure", false, true},
	{"bedrock", "m-bedrock", true, true},
	{"gemini", "m-gemini", false, false},
	{"vertex-google", "m-vertex-google", false, false},
	{"vertex-anthropic", "m-vertex-anthropic", true, true},
	{"responses", "m-responses", false, true}, // stateful: /v1/responses only
}

const billingTimeouts = `timeouts: {connect: 1s, first_byte: 2s, idle: 2s}`

// billingConfig has one provider, route and set of aliases per provider
// type, every one served by one mock: stop-<route> (after_output: stop),
// resume-<route> (continued by the route itself, or by the anthropic
// route when it cannot continue), restart-<route>.
func billingConfig() string {
	var b strings.Builder
	b.WriteString(`admin_key_env: KEY_ADMIN
tenants:
  - {id: acme, api_key_env: KEY_ACME}
providers:
  - {id: openai, type: openai, base_url: "MOCK/v1", api_key_env: KEY_OPENAI, ` + billingTimeouts + `}
  - {id: anthropic, type: anthropic, base_url: "MOCK", ` + billingTimeouts + `}
  - {id: azure, type: azure-openai, base_url: "MOCK", api_version: "2024-10-21", api_key_env: KEY_AZURE, ` + billingTimeouts + `}
  - {id: bedrock, type: bedrock, region: us-east-1, base_url: "MOCK", ` + billingTimeouts + `}
  - {id: gemini, type: gemini, base_url: "MOCK", api_key_env: KEY_GEMINI, ` + billingTimeouts + `}
  - {id: vertex-google, type: vertex, base_url: "MOCK", project: oncegate-mock, location: us-central1, publisher: google, credentials_file_env: SA_FILE, ` + billingTimeouts + `}
  - {id: vertex-anthropic, type: vertex, base_url: "MOCK", project: oncegate-mock, location: us-east5, publisher: anthropic, credentials_file_env: SA_FILE, ` + billingTimeouts + `}
  - {id: responses, type: openai-responses, base_url: "MOCK/v1", api_key_env: KEY_OPENAI, ` + billingTimeouts + `}
routes:
`)
	for i, bt := range billingTypes {
		cont := "none"
		if bt.continues {
			cont = "assistant_prefill"
		}
		fmt.Fprintf(&b, "  - {id: %s, provider: %s, model: %s, capabilities: {input: [text], streaming: true, max_context_tokens: 100000, max_output_tokens: 1000, continuation: %s}, "+
			"behavior_class: chat-v1, data_boundary: external, max_attempts: 3, price: {input_usd_per_mtok: %d, output_usd_per_mtok: %d}}\n",
			bt.route, bt.route, bt.model, cont, i+1, 10*(i+1))
	}
	b.WriteString("models:\n")
	const retry = "retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}"
	for _, bt := range billingTypes {
		fmt.Fprintf(&b, "  - {name: stop-%s, routes: [%s], %s, stream: {after_output: stop}}\n", bt.route, bt.route, retry)
		if bt.route == "responses" {
			continue
		}
		routes := bt.route
		if !bt.continues {
			routes += ", anthropic"
		}
		fmt.Fprintf(&b, "  - {name: resume-%s, routes: [%s], %s, stream: {after_output: resume}}\n", bt.route, routes, retry)
		fmt.Fprintf(&b, "  - {name: restart-%s, routes: [%s], %s, stream: {after_output: restart}}\n", bt.route, bt.route, retry)
	}
	return b.String()
}

// billingEnv is a gateway over billingConfig with one mock behind every
// provider, on the loopback network. Not parallel: the Bedrock route's
// credentials come from the environment.
type billingEnv struct {
	*env
	mock *mock.Mock
}

func newBillingEnv(t *testing.T, tokens int) *billingEnv {
	t.Helper()
	awsEnv(t, mock.DefaultAWS.AccessKeyID, mock.DefaultAWS.SecretAccessKey)
	m := mock.New(mock.Config{Tokens: tokens})
	t.Cleanup(m.Close)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	sa := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(sa, mock.ServiceAccountJSON(srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"KEY_ACME": keyAcme, "KEY_ADMIN": keyAdmin, "KEY_GEMINI": mock.DefaultGeminiAPIKey,
		"KEY_AZURE": mock.DefaultAzureAPIKey, "KEY_OPENAI": openaiKey, "SA_FILE": sa}
	yaml := strings.ReplaceAll(billingConfig(), "MOCK", srv.URL)
	e := &env{t: t, client: http.DefaultClient, yaml: yaml}
	var err error
	if e.pol, err = policy.Parse("billing.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	if e.secrets, err = e.pol.Config.ResolveSecrets(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	e.dbPath = filepath.Join(t.TempDir(), "ledger.db")
	e.opts = Options{DrainTimeout: 2 * time.Second, RejoinGrace: time.Second}
	e.start()
	t.Cleanup(func() { e.stop() })
	return &billingEnv{env: e, mock: m}
}

// on is the environment seen from subtest t: its failures end t, not the
// whole table.
func (b *billingEnv) on(t *testing.T) *env {
	e := *b.env
	e.t = t
	return &e
}

// The three client protocols a stream reaches the gateway in.
const (
	protoChat      = "chat.completions"
	protoMessages  = "messages"
	protoResponses = "responses"
)

// shown is what a client read of a stream through its official SDK: how
// many text deltas it received, the usage its stream's end reported (zero
// when it ended in an error), and how the stream ended.
type shown struct {
	requestID string
	deltas    int64
	usage     gw.Usage // the final usage chunk (message_delta, response.completed)
	err       error
}

// streamAs streams one request to alias in the client protocol with the
// official SDK, as the holder of key, asking for the final usage chunk.
func (e *env) streamAs(proto, alias, key string) shown {
	e.t.Helper()
	ctx := context.Background()
	var h http.Header
	var s shown
	const question = "What is a logical request?"
	switch proto {
	case protoChat:
		c := e.openai(&h, oopt2.WithAPIKey(key))
		st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: alias,
			Messages: userMsg(question), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				s.deltas++
			}
		}
		s.err = st.Err()
		s.usage = gw.Usage{InputTokens: acc.Usage.PromptTokens, OutputTokens: acc.Usage.CompletionTokens}
	case protoMessages:
		c := e.anthropicClient(&h, aopt.WithAPIKey(key))
		st := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(alias), MaxTokens: 500,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}})
		var msg anthropic.Message
		for st.Next() {
			ev := st.Current()
			_ = msg.Accumulate(ev)
			if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				s.deltas++
			}
		}
		s.err = st.Err()
		if s.err == nil {
			s.usage = gw.Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens}
		}
	case protoResponses:
		c := e.openai(&h, oopt2.WithAPIKey(key))
		st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: alias,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(question)}})
		for st.Next() {
			switch ev := st.Current(); ev.Type {
			case "response.output_text.delta":
				if ev.Delta != "" {
					s.deltas++
				}
			case "response.completed":
				s.usage = gw.Usage{InputTokens: ev.Response.Usage.InputTokens, OutputTokens: ev.Response.Usage.OutputTokens}
			case "error", "response.failed":
				s.err = fmt.Errorf("stream ended with %s", ev.Type)
			}
		}
		if err := st.Err(); err != nil {
			s.err = err
		}
	default:
		e.t.Fatalf("unknown protocol %s", proto)
	}
	s.requestID = h.Get("X-Oncegate-Request-Id")
	if s.requestID == "" {
		e.t.Fatalf("%s %s: no request id (%v)", proto, alias, s.err)
	}
	return s
}

// spendMark is what the store and the spend report say a tenant and a key
// were charged, read before and after a request.
type spendMark struct {
	tenant, key int64 // nano-USD
	reportCost  int64 // the spend report's row for the key
	reportOut   int64
}

// spend reads the tenant's and the key's charges over the test's two UTC
// days (a test may run across midnight) and the spend report's row for
// the key.
func (e *env) spend(keyID string, day int64) spendMark {
	e.t.Helper()
	ctx := context.Background()
	var m spendMark
	for d := day; d <= day+1; d++ {
		ts, err := e.store.Spend(ctx, d)
		if err != nil {
			e.t.Fatal(err)
		}
		m.tenant += ts["acme"]
	}
	ks, err := e.store.KeySpend(ctx, day, day+1)
	if err != nil {
		e.t.Fatal(err)
	}
	m.key = ks[keyID]
	from := time.Unix(day*86400, 0).UTC().Format(time.RFC3339)
	to := time.Unix((day+2)*86400, 0).UTC().Format(time.RFC3339)
	var rep struct{ Data []admin.SpendRow }
	path := "/admin/spend?group_by=key&key=" + url.QueryEscape(keyID) + "&from=" + url.QueryEscape(from) + "&to=" + url.QueryEscape(to)
	if st, body := e.adminDo(keyAdmin, "GET", path, "", &rep); st != 200 {
		e.t.Fatalf("spend report: %d %s", st, body)
	}
	for _, r := range rep.Data {
		m.reportCost += gwNano(r.CostUSD)
		m.reportOut += r.OutputTokens
	}
	return m
}

// checkCharged asserts that what the request added to the tenant's and
// the key's spend and to the spend report is what its receipt charges.
func checkCharged(t *testing.T, r *receipt.Receipt, before, after spendMark) {
	t.Helper()
	cost, out := gwNano(r.Totals.CostUSD), billedOutput(r)
	if got := after.tenant - before.tenant; got != cost {
		t.Errorf("tenant spend rose %d nano-USD, the receipt charges %d", got, cost)
	}
	if got := after.key - before.key; got != cost {
		t.Errorf("key spend rose %d nano-USD, the receipt charges %d", got, cost)
	}
	if got := after.reportCost - before.reportCost; got != cost {
		t.Errorf("the spend report rose %d nano-USD, the receipt charges %d", got, cost)
	}
	if got := after.reportOut - before.reportOut; got != out {
		t.Errorf("the spend report counts %d output tokens, the receipt %d", got, out)
	}
}

// billedOutput sums the output tokens a receipt bills.
func billedOutput(r *receipt.Receipt) (out int64) {
	for _, a := range r.Attempts {
		out += a.Usage.OutputTokens
	}
	return out
}

// A stream cut after K visible tokens with after_output: stop, on every
// provider type and in every client protocol: the client read K deltas,
// the receipt's attempt says it showed K and bills at least K output
// tokens (exactly what the mock generated), estimated; the tenant, the
// key and the spend report are charged what the receipt says. An
// Anthropic-protocol upstream's message_start says 1 output token and a
// Gemini chunk says 0: neither may stand as the bill.
func TestCutStreamIsBilledWhatTheClientWasShown(t *testing.T) {
	const tokens, cut = 24, 8
	b := newBillingEnv(t, tokens)
	key := b.issue(`{"tenant":"acme","name":"billing"}`)
	day := gw.Day(time.Now())
	for _, bt := range billingTypes {
		for _, proto := range []string{protoChat, protoMessages, protoResponses} {
			if bt.route == "responses" && proto != protoResponses {
				continue // a stateful alias serves /v1/responses only
			}
			if proto == protoResponses && !bt.turns {
				continue // a turn cannot be carried to the Gemini protocol
			}
			t.Run(bt.route+"/"+proto, func(t *testing.T) {
				e := b.on(t)
				b.mock.Reset()
				b.mock.SetScript(rules(mock.Rule{Model: bt.model, Fault: mock.Fault{Type: mock.FaultDropAfter, After: cut}}))
				before := e.spend(key.ID, day)
				s := e.streamAs(proto, "stop-"+bt.route, key.Key)
				if s.err == nil || s.deltas != cut {
					t.Fatalf("the client read %d deltas and error %v; want %d and the stream's in-band error", s.deltas, s.err, cut)
				}
				r := e.receipt(s.requestID) // verified
				if len(r.Attempts) != 1 || r.Terminal != "indeterminate" {
					t.Fatalf("terminal %s, attempts %+v", r.Terminal, r.Attempts)
				}
				a := r.Attempts[0]
				up := b.mock.Stats().ByRequestID[s.requestID]
				if a.Kind != "stream_interrupted_after_output" || a.EmittedTokens != cut || !a.UsageEstimated ||
					a.Usage.OutputTokens < cut || a.Usage.OutputTokens != up.OutputTokens || a.Usage.InputTokens == 0 {
					t.Fatalf("attempt %s shown %d, billed %+v (estimated %v); the client saw %d, the provider generated %d",
						a.Kind, a.EmittedTokens, a.Usage, a.UsageEstimated, s.deltas, up.OutputTokens)
				}
				checkCharged(t, r, before, e.spend(key.ID, day))
			})
		}
	}
}

// A stream cut after K visible tokens and resumed (by its own route, or by
// the anthropic route for a type that cannot continue) or restarted: every
// attempt is billed, the cut one at least what it showed, the sum is what
// the mock generated, and the client's final usage (the chat chunk
// include_usage asked for, the Messages message_delta) reports that sum.
func TestResumedAndRestartedStreamsBillEveryAttempt(t *testing.T) {
	const tokens, cut = 24, 8
	b := newBillingEnv(t, tokens)
	key := b.issue(`{"tenant":"acme","name":"billing"}`)
	day := gw.Day(time.Now())
	for _, bt := range billingTypes {
		if bt.route == "responses" {
			continue // a stateful route is neither continued nor restarted
		}
		for _, mode := range []string{"resume", "restart"} {
			for _, proto := range []string{protoChat, protoMessages} {
				t.Run(bt.route+"/"+mode+"/"+proto, func(t *testing.T) {
					e := b.on(t)
					b.mock.Reset()
					b.mock.SetScript(rules(mock.Rule{Model: bt.model, Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: cut}}))
					before := e.spend(key.ID, day)
					var s shown
					if mode == "resume" {
						s = e.streamAs(proto, "resume-"+bt.route, key.Key)
					} else {
						s = e.restartStream(proto, "restart-"+bt.route, key.Key)
					}
					if s.err != nil {
						t.Fatalf("stream: %v", s.err)
					}
					r := e.receipt(s.requestID)
					if len(r.Attempts) != 2 || r.Terminal != "succeeded" || r.Attempts[1].Purpose != mode {
						t.Fatalf("terminal %s, attempts %+v", r.Terminal, r.Attempts)
					}
					a := r.Attempts[0]
					if a.Kind != "stream_interrupted_after_output" || a.EmittedTokens != cut || !a.UsageEstimated || a.Usage.OutputTokens < cut {
						t.Fatalf("the cut attempt showed %d, billed %+v (estimated %v)", a.EmittedTokens, a.Usage, a.UsageEstimated)
					}
					var generated int64
					for _, c := range b.mock.Stats().ByModel {
						generated += c.OutputTokens
					}
					billed := billedOutput(r)
					if shownTotal := r.Attempts[0].EmittedTokens + r.Attempts[1].EmittedTokens; billed < shownTotal || billed != generated {
						t.Fatalf("billed %d output tokens; shown %d, generated %d", billed, shownTotal, generated)
					}
					if s.usage.OutputTokens != billed {
						t.Fatalf("the client's final usage says %d output tokens, the receipt bills %d", s.usage.OutputTokens, billed)
					}
					checkCharged(t, r, before, e.spend(key.ID, day))
				})
			}
		}
	}
}

// restartStream streams one request to a restart alias as a client that
// opted in to restarts (both headers: official SDKs never are restarted,
// so this client reads the SSE itself), asking for the final usage.
func (e *env) restartStream(proto, alias, key string) shown {
	e.t.Helper()
	path, body := "/v1/chat/completions", `{"model":"`+alias+`","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"What is a logical request?"}]}`
	if proto == protoMessages {
		path, body = "/v1/messages", `{"model":"`+alias+`","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"What is a logical request?"}]}`
	}
	res, b := e.postKey(key, path, body, map[string]string{"X-Oncegate-Accept-Restart": "1", "X-Oncegate-Stream-Events": "1"})
	s := shown{requestID: res.Header.Get("X-Oncegate-Request-Id")}
	text := string(b)
	if res.StatusCode != 200 || !strings.Contains(text, "event: oncegate.restart") {
		s.err = fmt.Errorf("status %d, no restart event:\n%s", res.StatusCode, text)
		return s
	}
	u, ok := finalUsage(proto, text)
	if !ok {
		s.err = fmt.Errorf("no final usage in:\n%s", text)
	}
	s.usage = u
	return s
}

// finalUsage reads the usage a raw stream's end reported: the chat chunk
// carrying usage, or the Messages message_start's input and
// message_delta's output.
func finalUsage(proto, body string) (gw.Usage, bool) {
	var u gw.Usage
	found := false
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
				InputTokens      int64 `json:"input_tokens"`
				OutputTokens     int64 `json:"output_tokens"`
			} `json:"usage"`
			Message *struct {
				Usage struct {
					InputTokens int64 `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		switch {
		case proto == protoChat && ev.Usage != nil:
			u, found = gw.Usage{InputTokens: ev.Usage.PromptTokens, OutputTokens: ev.Usage.CompletionTokens}, true
		case proto == protoMessages && ev.Type == "message_start" && ev.Message != nil:
			u.InputTokens = ev.Message.Usage.InputTokens
		case proto == protoMessages && ev.Type == "message_delta" && ev.Usage != nil:
			u.OutputTokens, found = ev.Usage.OutputTokens, true
		}
	}
	return u, found
}

// A hedge that wins the race and is then cut after K visible tokens: the
// hedge bills at least K output tokens (what the Anthropic mock
// generated, not message_start's 1) and the primary that lost, cancelled
// before any output, bills its prompt.
func TestHedgedStreamCutIsBilledWhatItShowed(t *testing.T) {
	t.Parallel()
	const cut = 8
	o := slowPrimary()
	o.config = strings.Replace(testConfig, "\nmodels:\n", `
models:
  - name: hedged-claude-stop
    routes: [primary, claude]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {after_output: stop}
    hedge: {after: 50ms}
`, 1)
	inBubble(t, o, func(t *testing.T, e *env) {
		e.anthropic.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: cut})))
		s := e.streamAs(protoChat, "hedged-claude-stop", keyAcme)
		if s.err == nil || s.deltas != cut {
			t.Fatalf("the client read %d deltas and error %v; want %d and the in-band error", s.deltas, s.err, cut)
		}
		r := e.receipt(s.requestID)
		if len(r.Attempts) != 2 || r.Terminal != "indeterminate" {
			t.Fatalf("terminal %s, attempts %+v", r.Terminal, r.Attempts)
		}
		p, h := r.Attempts[0], r.Attempts[1]
		pc, _, ac := e.upstreamCalls(s.requestID)
		if p.Cause != "hedge_lost" || p.VisibleOutput || p.Usage.OutputTokens != pc.OutputTokens || p.Usage.InputTokens == 0 {
			t.Fatalf("the primary that lost: %+v (its mock generated %d)", p, pc.OutputTokens)
		}
		if h.Purpose != "hedge" || h.Kind != "stream_interrupted_after_output" || h.EmittedTokens != cut || !h.UsageEstimated ||
			h.Usage.OutputTokens < cut || h.Usage.OutputTokens != ac.OutputTokens {
			t.Fatalf("the hedge showed %d, billed %+v (estimated %v); its mock generated %d", h.EmittedTokens, h.Usage, h.UsageEstimated, ac.OutputTokens)
		}
	})
}

// A stateful turn's stream cut after K events once the provider had
// committed the turn: the gateway finds the committed answer and sends
// the client the rest of it. The attempt's emitted_tokens is what the
// client read — the K deltas before the cut and the rest in one — and it
// bills no less.
func TestAdoptedStatefulStreamCountsWhatWasShown(t *testing.T) {
	t.Parallel()
	const tokens, cut = 24, 8
	inBubble(t, envOptions{mock: mock.Config{Tokens: tokens}}, func(t *testing.T, e *env) {
		e.fallback.SetScript(rules(mock.Rule{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultCommitThenReset, After: cut}}))
		s := e.streamAs(protoResponses, "convo", keyAcme)
		if s.err != nil || s.deltas != cut+1 {
			t.Fatalf("the client read %d deltas (%v); want the %d before the cut and the rest in one", s.deltas, s.err, cut)
		}
		r := e.receipt(s.requestID)
		if len(r.Attempts) != 1 || r.Terminal != "succeeded" {
			t.Fatalf("terminal %s, attempts %+v", r.Terminal, r.Attempts)
		}
		a := r.Attempts[0]
		if a.Reconciled != "found" || a.EmittedTokens != s.deltas || a.Usage.OutputTokens < a.EmittedTokens || !a.UsageEstimated {
			t.Fatalf("the adopted attempt says it showed %d and bills %+v; the client read %d deltas", a.EmittedTokens, a.Usage, s.deltas)
		}
		if s.usage.OutputTokens != a.Usage.OutputTokens {
			t.Fatalf("response.completed reports %d output tokens, the receipt bills %d", s.usage.OutputTokens, a.Usage.OutputTokens)
		}
	})
}

// Recovery settles a request whose gateway died while its resumed stream
// ran on another route: the attempt in flight is billed its worst case —
// here the request's 10 tokens left — but a joiner on another gateway was
// shown 12 of the answer, so it is billed 12, its cost and the request's
// charge with it.
func TestRecoveryNeverBillsBelowWhatAJoinerWasShown(t *testing.T) {
	t.Parallel()
	pol, secrets := recoveryPolicy(t)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := New(pol, secrets, Options{Ledger: st})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	const id = "01dead00-0000-7000-8000-00000000b111"
	hdr, _ := json.Marshal(receipt.Receipt{RequestID: id, Tenant: "acme", Operation: "chat.completions", Model: "chat-pair", Stream: true,
		CreatedAt: t0, Deadline: t0.Add(time.Minute), Request: receipt.Facts{EstimatedInputTokens: 100, MaxOutputTokens: 10, MaxDataBoundary: "external"}})
	first, _ := json.Marshal(receipt.Attempt{Ordinal: 1, Route: "primary", Provider: "mock-primary", Purpose: "initial", StartedAt: t0, ObservedAt: t0,
		OutcomeClass: "interrupted", Kind: "stream_interrupted_after_output", VisibleOutput: true, EmittedTokens: 2,
		Usage: gw.Usage{InputTokens: 100, OutputTokens: 2}})
	resume, _ := json.Marshal(ledger.Dispatch{Ordinal: 2, Route: "claude", Purpose: "resume", NotBefore: t0})
	evs := []ledger.Event{{Seq: 1, Type: ledger.EvCreated, Data: hdr}, {Seq: 2, Type: ledger.EvObserved, Data: first},
		{Seq: 3, Type: ledger.EvReserved, Data: resume}, {Seq: 4, Type: ledger.EvDispatch, Data: resume}}
	for i := range evs {
		evs[i].RequestID, evs[i].Generation, evs[i].At = id, 1, t0
	}
	rec := &ledger.Record{Identity: "k:" + id, RequestID: id, Tenant: "acme", Generation: 1}
	f := g.recovery.Settlement(rec, evs, t0.Add(time.Minute), coord.Seen{Joined: 1, Emitted: 12})
	r, err := receipt.Parse(f.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Attempts) != 2 || r.Terminal != "indeterminate" {
		t.Fatalf("terminal %s, attempts %+v", r.Terminal, r.Attempts)
	}
	a := r.Attempts[1]
	want := pol.Route("claude").Price.Cost(a.Usage)
	if a.EmittedTokens != 12 || a.Usage.OutputTokens < 12 || !a.UsageEstimated || gw.NanoFromUSD(a.CostUSD) != want {
		t.Fatalf("the attempt in flight shown %d, billed %+v at $%v (its usage costs %v)", a.EmittedTokens, a.Usage, a.CostUSD, want.USD())
	}
	if tot := r.ComputeTotals(); r.Totals.BillableTokens != tot.BillableTokens || f.Charge != int64(gw.NanoFromUSD(tot.CostUSD)) {
		t.Fatalf("totals %+v, charge %d; the attempts sum to %+v", r.Totals, f.Charge, tot)
	}
}

// A stream that completed with the provider's usage is billed that usage,
// not an estimate: the pieces the gateway counts as shown never exceed
// what a provider bills. A tool call's opening (its id and name) is not
// counted — the mock, like the count, bills a call's argument pieces —
// and neither is the refusal the gateway writes for an answer Gemini
// withheld without a word (billed 0 output tokens).
func TestCompleteStreamsAreBilledTheProvidersUsage(t *testing.T) {
	t.Parallel()
	lookup := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "lookup", Parameters: lookupSchema})}
	check := func(t *testing.T, e *env, alias string, up func(id string) mock.Counter, tools bool) {
		t.Helper()
		var h http.Header
		c := e.openai(&h)
		p := oaParams(alias, "What is a logical request?")
		if tools {
			p.Tools = lookup
		}
		st := c.Chat.Completions.NewStreaming(context.Background(), p)
		var pieces int64
		for st.Next() {
			if ch := st.Current(); len(ch.Choices) > 0 {
				d := ch.Choices[0].Delta
				for _, tc := range d.ToolCalls {
					if tc.Function.Arguments != "" {
						pieces++
					}
				}
				if d.Content != "" {
					pieces++
				}
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		id := h.Get("X-Oncegate-Request-Id")
		r := e.receipt(id)
		a := r.Attempts[0]
		if len(r.Attempts) != 1 || a.Kind != "ok" || a.EmittedTokens != pieces || a.UsageEstimated || a.Usage.OutputTokens != up(id).OutputTokens {
			t.Fatalf("%s: shown %d (the client read %d pieces), billed %+v (estimated %v); the provider billed %d",
				alias, a.EmittedTokens, pieces, a.Usage, a.UsageEstimated, up(id).OutputTokens)
		}
	}
	t.Run("tool calls", func(t *testing.T) {
		inBubble(t, envOptions{mock: mock.Config{Tokens: 12}}, func(t *testing.T, e *env) {
			check(t, e, "solo", func(id string) mock.Counter { return e.primary.Stats().ByRequestID[id] }, true)
			check(t, e, "claude", func(id string) mock.Counter { return e.anthropic.Stats().ByRequestID[id] }, true)
		})
	})
	t.Run("an answer Gemini withheld", func(t *testing.T) {
		g := newGoogleEnv(t, 12)
		g.mock.SetScript(rules(mock.Rule{Model: "gemini-2.5-flash", Fault: mock.Fault{Type: mock.FaultContentPolicy, ErrorType: "SAFETY"}}))
		check(t, g.env, "gemini", func(id string) mock.Counter { return g.mock.Stats().ByRequestID[id] }, false)
	})
}
