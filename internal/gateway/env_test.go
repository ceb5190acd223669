package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncegate/oncegate/internal/alerts"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/clock"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/memnet"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/quota"
	"github.com/oncegate/oncegate/internal/receipt"
)

// testConfig has two OpenAI-protocol mocks (primary, fallback) and one
// Anthropic-protocol mock, and aliases exercising each policy knob. Base
// delays are short so tests run fast; jitter is off so schedules are exact.
const testConfig = `
admin_key_env: KEY_ADMIN
tenants:
  - {id: acme, api_key_env: KEY_ACME}
  - {id: globex, api_key_env: KEY_GLOBEX, max_data_boundary: private}
  - {id: initech, api_key_env: KEY_INITECH, budget: {requests_per_minute: 3}}
  - {id: umbrella, api_key_env: KEY_UMBRELLA, budget: {cost_usd_per_day: 0.001}}
  - {id: spender, api_key_env: KEY_SPENDER, budget: {cost_usd_per_day: 0.05}}
  - {id: hooli, api_key_env: KEY_HOOLI, budget: {max_concurrent: 2}}
providers:
  - {id: mock-primary, type: openai, base_url: "PRIMARY/v1", api_key_env: KEY_UPSTREAM_ONE, timeouts: {connect: 1s, first_byte: 400ms, idle: 1s}}
  - {id: mock-fallback, type: openai, base_url: "FALLBACK/v1", timeouts: {connect: 1s, first_byte: 400ms, idle: 1s}}
  - {id: mock-anthropic, type: anthropic, base_url: "ANTHROPIC", timeouts: {connect: 1s, first_byte: 400ms, idle: 1s}}
  - {id: mock-stateful, type: openai-responses, base_url: "FALLBACK/v1", timeouts: {connect: 1s, first_byte: 400ms, idle: 1s}}
routes:
  - id: primary
    provider: mock-primary
    model: primary-model
    capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 8000, max_output_tokens: 1000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 3
    price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}
  - id: fallback
    provider: mock-fallback
    model: fallback-model
    capabilities: {input: [text, image], tools: true, streaming: true, max_context_tokens: 32000, max_output_tokens: 1000, continuation: none}
    behavior_class: chat-v1
    data_boundary: external
    max_attempts: 2
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 6}
  - id: claude
    provider: mock-anthropic
    model: claude-model
    capabilities: {input: [text, image], tools: true, streaming: true, max_context_tokens: 200000, max_output_tokens: 2000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: external
    max_attempts: 2
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}
  - id: primary-cached
    provider: mock-primary
    model: primary-model
    capabilities: {input: [text], streaming: true, max_context_tokens: 8000, max_output_tokens: 1000}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 1
    price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2, cached_input_usd_per_mtok: 0.5}
  - id: claude-cached
    provider: mock-anthropic
    model: claude-model
    capabilities: {input: [text], streaming: true, max_context_tokens: 200000, max_output_tokens: 2000}
    behavior_class: chat-v1
    data_boundary: external
    max_attempts: 1
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15, cached_input_usd_per_mtok: 0.3, cache_write_usd_per_mtok: 3.75}
  - id: east
    provider: mock-primary
    model: east-model
    capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 8000, max_output_tokens: 1000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 2
    weight: 3
    price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}
  - id: west
    provider: mock-fallback
    model: west-model
    capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 8000, max_output_tokens: 1000, continuation: assistant_prefill}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 2
    weight: 1
    price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}
  - id: catalogued
    provider: mock-primary
    model: gpt-4o-mini # no price, no context window: the catalogue's
    capabilities: {input: [text], streaming: true}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 1
  - id: catalogued-override
    provider: mock-primary
    model: gpt-4o-mini
    capabilities: {input: [text], streaming: true, max_output_tokens: 500}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 1
    price: {input_usd_per_mtok: 0.2, output_usd_per_mtok: 0.8}
  - id: stateful
    provider: mock-stateful
    model: stateful-model
    capabilities: {input: [text], tools: true, streaming: true, max_context_tokens: 32000, max_output_tokens: 1000}
    behavior_class: chat-v1
    data_boundary: private
    max_attempts: 3
    price: {input_usd_per_mtok: 2, output_usd_per_mtok: 8}
models:
  - name: embed
    routes: [claude, primary, fallback]
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: convo
    routes: [stateful]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: full, deadline: 10s}
  - name: chat
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, retry_after_cap: 300ms, jitter: none, deadline: 10s}
  - name: chat-stop
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {after_output: stop}
  - name: chat-restart
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {after_output: restart}
  - name: chat-buffered
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {buffer: true}
  - name: claude
    routes: [claude]
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: to-claude
    routes: [claude, fallback]
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: chat-pair
    routes: [primary, claude]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: chat-pair-drop
    routes: [primary, claude]
    may_drop: [seed]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: chat-pair-same
    routes: [primary, claude]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {resume_routes: same}
  - name: solo
    routes: [primary]
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: hedged
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    hedge: {after: 50ms}
  - name: hedged-buffered
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
    stream: {buffer: true}
    hedge: {after: 50ms}
  - name: cached-openai
    routes: [primary-cached]
    retry: {max_attempts: 1, jitter: none, deadline: 10s}
  - name: cached-claude
    routes: [claude-cached]
    retry: {max_attempts: 1, jitter: none, deadline: 10s}
  - name: chat-default
    routes: [primary]
    default_output_tokens: 64
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: spread
    routes: [[east, west]]
    strategy: weighted
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: spread-tiers
    routes: [[east, west], claude]
    strategy: weighted
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: least-busy
    routes: [[east, west]]
    strategy: least_busy
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 30s}
  - name: fastest
    routes: [[east, west]]
    strategy: latency
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: headroom
    routes: [[east, west]]
    strategy: quota
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s}
  - name: catalogued
    routes: [catalogued]
    retry: {max_attempts: 1, jitter: none, deadline: 10s}
  - name: catalogued-override
    routes: [catalogued-override]
    retry: {max_attempts: 1, jitter: none, deadline: 10s}
  - name: capped
    routes: [primary]
    accept_unreachable_routes: true # its tests send max_tokens
    retry: {max_attempts: 3, base_delay: 20ms, max_delay: 80ms, jitter: none, deadline: 10s, max_cost_usd: 0.001}
`

const (
	keyAcme     = "sk-og-acme-test"
	keyGlobex   = "sk-og-globex-test"
	keyInitech  = "sk-og-initech-test"
	keyUmbrella = "sk-og-umbrella-test"
	keySpender  = "sk-og-spender-test"
	keyHooli    = "sk-og-hooli-test"
	keyAdmin    = "sk-og-admin-test"
	// primaryProviderKey is the gateway's own credential at the primary.
	primaryProviderKey = "sk-provider-primary-7f3a9c"
)

type env struct {
	t                            *testing.T
	primary, fallback, anthropic *mock.Mock
	gw                           *Gateway
	store                        *sqlite.Store
	dbPath                       string
	url                          string
	pol                          *policy.Policy
	secrets                      *config.Secrets
	opts                         Options
	wrap                         func(ledger.Store) ledger.Store
	yaml                         string // the configuration the gateway was started with
	stop                         func() // stops the gateway and closes its store
	// client reaches the gateway (and, in a bubble, only it can).
	client *http.Client
	// mem is the in-memory network of an environment in a synctest
	// bubble (nil: the loopback network).
	mem *memnet.Network
}

func newEnv(t *testing.T, mcfg mock.Config) *env {
	t.Helper()
	return newEnvWith(t, mcfg, "", nil)
}

// newEnvWith is newEnv with extra top-level configuration (appended YAML)
// and a log sink.
func newEnvWith(t *testing.T, mcfg mock.Config, extraYAML string, logs io.Writer) *env {
	t.Helper()
	return newEnvOpts(t, envOptions{mock: mcfg, yaml: extraYAML, logs: logs})
}

// envOptions vary a test environment.
type envOptions struct {
	mock mock.Config
	// primary, when set, configures the primary mock instead of mock.
	primary *mock.Config
	// yaml is extra top-level configuration, appended.
	yaml string
	logs io.Writer
	// bubble runs everything on an in-memory network, for tests run with
	// synctest.Test.
	bubble bool
	// clock is the gateway's clock (default: the system clock).
	clock clock.Clock
	// breakers, budget and tenants replace the gateway's own (nil: its own).
	breakers breaker.Admitter
	budget   breaker.Retries
	tenants  quota.Ceiling
	// wrap, when set, wraps the store the gateway writes to.
	wrap func(ledger.Store) ledger.Store
	// tracer records the gateway's spans.
	tracer trace.Tracer
	// front, when set, stands in front of the primary mock: what it
	// answers itself, the mock never sees.
	front func(mock http.Handler) http.Handler
	// fallbackFront is front for the fallback mock.
	fallbackFront func(mock http.Handler) http.Handler
	// config, when set, replaces testConfig (PRIMARY, FALLBACK and
	// ANTHROPIC stand for the three mocks' URLs).
	config string
	// entra serves the primary mock's Microsoft Entra ID fake over TLS
	// too, as the gateway's token authority.
	entra bool
	// webhook replaces the budget webhook's defaults (its backoff).
	webhook alerts.WebhookConfig
}

func newEnvOpts(t *testing.T, o envOptions) *env {
	t.Helper()
	mcfg, extraYAML, logs := o.mock, o.yaml, o.logs
	e := &env{t: t, wrap: o.wrap, client: http.DefaultClient}
	if o.bubble {
		// Everything on an in-memory network, so that a test run with
		// synctest.Test waits on fake time: deterministic, and instant.
		e.mem = memnet.New()
		t.Cleanup(e.mem.Close) // last: whatever is still connected ends
		tr := &http.Transport{DialContext: e.mem.DialContext}
		bodies := &closeBodies{base: tr}
		e.client = &http.Client{Transport: bodies}
		t.Cleanup(func() { bodies.closeAll(); tr.CloseIdleConnections() })
	}
	pcfg := mcfg
	if o.primary != nil {
		pcfg = *o.primary
	}
	e.primary, e.fallback, e.anthropic = mock.New(pcfg), mock.New(mcfg), mock.New(mcfg)
	urls := make([]string, 3)
	for i, m := range []*mock.Mock{e.primary, e.fallback, e.anthropic} {
		t.Cleanup(m.Close)
		var h http.Handler = m
		if i == 0 && o.front != nil {
			h = o.front(m)
		}
		if i == 1 && o.fallbackFront != nil {
			h = o.fallbackFront(m)
		}
		if e.mem == nil {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			urls[i] = srv.URL
			continue
		}
		name := []string{"primary", "fallback", "anthropic"}[i] + ".test"
		ln, err := e.mem.Listen(name + ":80")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		urls[i] = "http://" + name
	}
	base := testConfig
	if o.config != "" {
		base = o.config
	}
	yaml := strings.NewReplacer("PRIMARY", urls[0], "FALLBACK", urls[1], "ANTHROPIC", urls[2]).Replace(base) + extraYAML
	var err error
	e.pol, err = policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	e.yaml = yaml
	e.secrets, err = e.pol.Config.ResolveSecrets(func(k string) (string, bool) { return e.envKeys()[k], true })
	if err != nil {
		t.Fatal(err)
	}
	e.dbPath = filepath.Join(t.TempDir(), "ledger.db")
	e.opts = Options{DrainTimeout: 2 * time.Second, RejoinGrace: time.Second, Clock: o.clock,
		Breakers: o.breakers, RetryBudget: o.budget, Tenants: o.tenants, Tracer: o.tracer, BudgetWebhook: o.webhook}
	if e.mem != nil {
		e.opts.Dial = e.mem.DialContext
	}
	if o.entra {
		srv := httptest.NewTLSServer(e.primary)
		t.Cleanup(srv.Close)
		e.opts.TokenAuthority = &provider.TokenAuthority{URL: srv.URL, Client: mock.OnlyTo(srv.Client(), srv.URL)}
	}
	if logs != nil {
		e.opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

// start runs a gateway over the store at e.dbPath.
func (e *env) start() {
	t := e.t
	var err error
	if e.store, err = sqlite.Open(e.dbPath); err != nil {
		t.Fatal(err)
	}
	opts := e.opts
	opts.Ledger = e.store
	if e.wrap != nil {
		opts.Ledger = e.wrap(e.store)
	}
	if e.gw, err = New(e.pol, e.secrets, opts); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if e.mem != nil {
		ln, err = e.mem.Listen("gateway.test:80")
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g, st := e.gw, e.store
	go func() { _ = g.Serve(ctx, ln); close(done) }()
	e.stop = func() { cancel(); <-done; g.Close(); _ = st.Close() }
	e.url = "http://" + ln.Addr().String()
}

// restart stops the gateway and starts a new one over the same store, as
// a new process would after a restart.
func (e *env) restart() {
	e.stop()
	e.start()
}

// openai is an official OpenAI SDK client at its default settings (retries
// included) pointed at the gateway; header captures response headers.
func (e *env) openai(header *http.Header, opts ...oopt2.RequestOption) openai.Client {
	opts = append([]oopt2.RequestOption{oopt2.WithBaseURL(e.url + "/v1"), oopt2.WithAPIKey(keyAcme), oopt2.WithHTTPClient(e.client)}, opts...)
	if header != nil {
		opts = append(opts, oopt2.WithMiddleware(captureHeaders(header)))
	}
	return openai.NewClient(opts...)
}

func (e *env) anthropicClient(header *http.Header, opts ...aopt.RequestOption) anthropic.Client {
	opts = append([]aopt.RequestOption{aopt.WithBaseURL(e.url), aopt.WithAPIKey(keyAcme), aopt.WithHTTPClient(e.client)}, opts...)
	if header != nil {
		opts = append(opts, aopt.WithMiddleware(aopt.Middleware(captureHeaders(header))))
	}
	return anthropic.NewClient(opts...)
}

func captureHeaders(dst *http.Header) oopt2.Middleware {
	return func(r *http.Request, next oopt2.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if res != nil {
			*dst = res.Header.Clone()
		}
		return res, err
	}
}

// receipt fetches a receipt through the API as the acme tenant and
// verifies it.
func (e *env) receipt(id string) *receipt.Receipt {
	e.t.Helper()
	return e.receiptAs(keyAcme, id)
}

// receiptAs fetches and verifies a receipt as the tenant of key.
func (e *env) receiptAs(key, id string) *receipt.Receipt {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.url+"/v1/receipts/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		e.t.Fatalf("receipt %s: status %d", id, res.StatusCode)
	}
	var r receipt.Receipt
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		e.t.Fatal(err)
	}
	if drifts := receipt.Verify(e.pol, &r); len(drifts) != 0 {
		e.t.Fatalf("receipt %s does not verify: %v", id, drifts)
	}
	return &r
}

// awaitReceipt waits for a request's receipt to be written (by recovery,
// for one whose owner could not finish it).
func (e *env) awaitReceipt(id string) *receipt.Receipt {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", e.url+"/v1/receipts/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		res, err := e.client.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		var r receipt.Receipt
		err = json.NewDecoder(res.Body).Decode(&r)
		res.Body.Close()
		if res.StatusCode == 200 && err == nil && r.Terminal != "" {
			return &r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no receipt for %s after 30 s (last status %d)", id, res.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstreamCalls counts what every mock saw for one logical request.
func (e *env) upstreamCalls(requestID string) (primary, fallback, anthropic mock.Counter) {
	return e.primary.Stats().ByRequestID[requestID], e.fallback.Stats().ByRequestID[requestID], e.anthropic.Stats().ByRequestID[requestID]
}

func userMsg(text string) []openai.ChatCompletionMessageParamUnion {
	return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}
}

// answer is the mock's deterministic answer to a single user message, in
// whichever protocol it was asked.
func answer(t *testing.T, _ provider.Protocol, text string, n int) string {
	t.Helper()
	return mock.AnswerFor(0, text, n)
}

func optTimeout(d time.Duration) oopt2.RequestOption { return oopt2.WithRequestTimeout(d) }

func (e *env) storePath() string { return e.dbPath }

// envKeys are the environment the test configuration's secrets come from.
func (e *env) envKeys() map[string]string {
	return map[string]string{"KEY_ACME": keyAcme, "KEY_GLOBEX": keyGlobex, "KEY_INITECH": keyInitech, "KEY_HOOLI": keyHooli, "KEY_UMBRELLA": keyUmbrella,
		"KEY_SPENDER": keySpender, "KEY_UPSTREAM_ONE": primaryProviderKey, "KEY_ADMIN": keyAdmin,
		"KEY_AZURE": mock.DefaultAzureAPIKey, "KEY_AZURE_BAD": azureBadKey, "KEY_TAG": azureTagSecret, "KEY_WEBHOOK": webhookSecret}
}

func oaParams(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: userMsg(text)}
}

// oopt sets one request header on an OpenAI SDK call.
func oopt(k, v string) oopt2.RequestOption { return oopt2.WithHeader(k, v) }

// waitFor polls cond until it holds or three seconds pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	waitWithin(t, 3*time.Second, cond)
}

// waitWithin is waitFor with its own patience, for work whose length
// scales with the machine (the race detector slows it several times).
func waitWithin(t *testing.T, patience time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inBubble runs test in a synctest bubble over an environment on an
// in-memory network: time is fake and advances only when every goroutine
// waits, so sleeps, timeouts and intervals are exact and cost nothing,
// however busy the machine is.
func inBubble(t *testing.T, o envOptions, test func(*testing.T, *env)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		o.bubble = true
		test(t, newEnvOpts(t, o))
	})
}

// closeBodies is a RoundTripper that remembers every response body, so
// that a bubble's end can close the ones a test left open: a connection
// whose body nobody closed keeps its reader goroutine, and a synctest
// bubble ends only when all its goroutines have.
type closeBodies struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []io.Closer
}

func (c *closeBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.bodies = append(c.bodies, res.Body)
		c.mu.Unlock()
	}
	return res, err
}

func (c *closeBodies) closeAll() {
	c.mu.Lock()
	bodies := c.bodies
	c.bodies = nil
	c.mu.Unlock()
	for _, b := range bodies {
		_ = b.Close()
	}
}
