package mock

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config sets the mock's defaults.
type Config struct {
	// Seed varies the deterministic text.
	Seed int64
	// TTFT is the time to the first token; TokenInterval the time between
	// tokens. Zero means as fast as possible.
	TTFT          time.Duration
	TokenInterval time.Duration
	// Tokens is the length of an answer (default 24); a request's
	// max_tokens lowers it.
	Tokens int
	// CachedTokens and CacheWriteTokens are how many of each prompt's
	// tokens the usage reports as read from and written to the prompt
	// cache (capped at the prompt; OpenAI's Chat Completions has no cache
	// writes, so it reports them as plain input; the Responses API names
	// them). Default 0: no caching.
	CachedTokens     int64
	CacheWriteTokens int64
	Script           Script
	// AzureAPIKey is the api-key the Azure OpenAI fake accepts (default
	// DefaultAzureAPIKey).
	AzureAPIKey string
	// GeminiAPIKey is the x-goog-api-key the Gemini API fake accepts
	// (default DefaultGeminiAPIKey).
	GeminiAPIKey string
	// AWS is the credentials and region whose SigV4 signatures the
	// Bedrock fake accepts (defaults: DefaultAWS).
	AWS AWSCredentials
	// VertexClientEmail and VertexPublicKey are the service account whose
	// signed JWTs the token endpoint accepts (defaults: the test account
	// of ServiceAccountJSON); VertexTokenTTL is the life of the access
	// tokens it issues (default 1h).
	VertexClientEmail string
	VertexPublicKey   *rsa.PublicKey
	VertexTokenTTL    time.Duration
	// Entra is the app registration the Microsoft Entra ID fake knows
	// (entra.go; defaults: DefaultEntraTenant, …).
	Entra EntraConfig
}

// Mock is the fake provider. It is an http.Handler and safe for
// concurrent use.
type Mock struct {
	cfg    Config
	mux    *http.ServeMux
	stats  *stats
	mu     sync.Mutex
	script Script
	setAt  time.Time
	calls  map[string]int
	counts map[string]int // count_tokens calls per model
	ids    int64
	// modelLookups counts the model lookups (models.go).
	modelLookups int64
	state        *rsState
	// traceparents: the last traceparent each request id came with.
	traceparents map[string]string
	vertex       *vertexAuth
	entra        *entraAuth
	closing      chan struct{}
	once         sync.Once
}

// New returns a mock provider.
func New(cfg Config) *Mock {
	if cfg.Tokens <= 0 {
		cfg.Tokens = 24
	}
	m := &Mock{cfg: cfg, stats: newStats(), script: cfg.Script, setAt: time.Now(), calls: map[string]int{}, counts: map[string]int{}, closing: make(chan struct{}),
		state: newRSState(), traceparents: map[string]string{}, vertex: newVertexAuth(&cfg), entra: newEntraAuth(cfg.Entra)}
	m.mux = http.NewServeMux()
	m.mux.HandleFunc("POST /v1/chat/completions", m.serveOpenAI)
	m.mux.HandleFunc("POST /v1/messages", m.serveAnthropic)
	m.mux.HandleFunc("POST /v1/responses", m.serveResponses)
	m.mux.HandleFunc("POST /v1/embeddings", m.serveEmbeddings)
	m.mux.HandleFunc("POST /v1/messages/count_tokens", m.countTokens)
	m.mux.HandleFunc("GET /v1/responses/{id}", m.getResponse)
	m.mux.HandleFunc("DELETE /v1/responses/{id}", m.deleteResponse)
	m.mux.HandleFunc("GET /v1/responses/{id}/input_items", m.inputItems)
	m.mux.HandleFunc("POST /v1/conversations", m.createConversation)
	m.mux.HandleFunc("GET /v1/conversations/{id}/items", m.listItems)
	m.mux.HandleFunc("DELETE /v1/conversations/{id}/items/{item}", m.deleteItem)
	m.mux.HandleFunc("POST /openai/deployments/{deployment}/chat/completions", m.serveAzure)
	m.mux.HandleFunc("POST /openai/v1/chat/completions", m.serveAzure)
	m.mux.HandleFunc("POST /openai/deployments/{deployment}/embeddings", m.serveAzureEmbeddings)
	m.mux.HandleFunc("POST /openai/v1/embeddings", m.serveAzureEmbeddings)
	m.mux.HandleFunc("GET /v1/models/{model}", m.getModel)
	m.mux.HandleFunc("GET /v1beta/models/{model}", m.getGeminiModel)
	m.mux.HandleFunc("GET /v1/publishers/{publisher}/models/{model}", m.getPublisherModel)
	m.mux.HandleFunc("POST /v1beta/models/{call}", m.serveGemini)
	m.mux.HandleFunc("POST /v1/models/{call}", m.serveGemini)
	for _, v := range []string{"v1", "v1beta1"} {
		m.mux.HandleFunc("POST /"+v+"/projects/{project}/locations/{location}/publishers/{publisher}/models/{call}", m.serveVertex)
	}
	m.mux.HandleFunc("POST /token", m.serveToken)
	m.routeEntra()
	m.mux.HandleFunc("POST /model/{model}/converse", m.serveBedrock)
	m.mux.HandleFunc("POST /model/{model}/converse-stream", m.serveBedrock)
	m.mux.HandleFunc("GET /mock/stats", m.serveStats)
	m.mux.HandleFunc("POST /mock/reset", func(w http.ResponseWriter, r *http.Request) { m.Reset(); w.WriteHeader(204) })
	m.mux.HandleFunc("PUT /mock/script", m.serveScript)
	return m
}

func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// SetScript replaces the fault script and restarts its clock.
func (m *Mock) SetScript(s Script) {
	m.mu.Lock()
	m.script, m.setAt = s, time.Now()
	m.mu.Unlock()
}

// Reset clears the counters and per-model call numbers.
func (m *Mock) Reset() {
	m.mu.Lock()
	m.calls, m.counts = map[string]int{}, map[string]int{}
	m.stats = newStats()
	m.mu.Unlock()
}

// Traceparent is the W3C traceparent the last call of a request id
// carried ("" if none).
func (m *Mock) Traceparent(requestID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.traceparents[requestID]
}

// Stats returns a snapshot of the counters.
func (m *Mock) Stats() Stats {
	m.mu.Lock()
	s := m.stats
	m.mu.Unlock()
	return s.snapshot()
}

// Requests counts the requests received so far: Stats().Requests without
// copying the per-key counts, for callers that read it often.
func (m *Mock) Requests() int64 {
	m.mu.Lock()
	s := m.stats
	m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total.Requests
}

// Close releases requests that hang or stall, so a server can shut down.
func (m *Mock) Close() { m.once.Do(func() { close(m.closing) }) }

func (m *Mock) serveStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m.Stats())
}

func (m *Mock) serveScript(w http.ResponseWriter, r *http.Request) {
	var s Script
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&s); err != nil {
		http.Error(w, "bad script: "+err.Error(), http.StatusBadRequest)
		return
	}
	m.SetScript(s)
	w.WriteHeader(http.StatusNoContent)
}

// exchange is one request being answered.
type exchange struct {
	m      *Mock
	c      codec
	w      http.ResponseWriter
	r      *http.Request
	req    *ask
	lbl    labels
	st     *stats
	fault  *Fault
	id     string
	prompt int64
	out    int64 // tokens written so far
	// logprobs: an OpenAI request asked for log probabilities.
	logprobs bool
	// rs is set for a Responses API request: what it commits; emb for
	// an embeddings request.
	rs  *rsTurn
	emb *rsEmbed
	// body is the request's body, for codecs that authenticate it.
	body []byte
}

// begin counts a generation request and matches it against the script.
func (m *Mock) begin(c codec, w http.ResponseWriter, r *http.Request, a *ask) *exchange {
	x := &exchange{m: m, c: c, w: w, r: r, req: a, prompt: a.promptTokens,
		lbl: labels{key: r.Header.Get("Idempotency-Key"), reqID: r.Header.Get("X-Oncegate-Request-Id"), model: a.model}}
	cont := a.continuation()
	m.mu.Lock()
	if tp := r.Header.Get("traceparent"); tp != "" && x.lbl.reqID != "" {
		m.traceparents[x.lbl.reqID] = tp
	}
	m.calls[a.model]++
	m.ids++
	x.st, x.id = m.stats, strconv.FormatInt(m.ids, 10)
	cl := call{model: a.model, key: x.lbl.key, n: m.calls[a.model], continuation: cont, since: time.Since(m.setAt)}
	for i := range m.script.Rules {
		if m.script.Rules[i].matches(cl, i) {
			f := m.script.Rules[i].Fault
			x.fault = &f
			break
		}
	}
	m.mu.Unlock()
	x.st.add(x.lbl, func(c *Counter) {
		c.Requests++
		if cont {
			c.Continuations++
		}
		c.MaxTokensAsked = max(c.MaxTokensAsked, a.maxTokens)
		if a.maxTokens == 0 {
			c.Unlimited++
		}
	})
	return x
}

// finishServe runs the exchange and counts a client that left.
func (x *exchange) finishServe() {
	x.run()
	// Until this handler returns, r.Context() ends only when the client
	// leaves: that is a disconnect the upstream saw.
	if x.r.Context().Err() != nil && x.faultType() != FaultReset && x.faultType() != FaultCommitThenReset {
		x.st.add(x.lbl, func(c *Counter) { c.Disconnects++ })
	}
}

func (x *exchange) faultType() string {
	if x.fault == nil {
		return ""
	}
	return x.fault.Type
}

func (x *exchange) run() {
	if a, ok := x.c.(authenticator); ok && !a.authenticate(x, x.body) {
		return
	}
	f := x.fault
	switch x.faultType() {
	case FaultStatus, FaultContextLength, FaultContentPolicy, FaultQuota, FaultRejectPrefill, FaultAuth, FaultModelNotFound:
		x.c.fail(x, f)
		return
	case FaultReset:
		reset(x.w)
		return
	case FaultHang:
		x.block(nil)
		return
	case FaultSilentClose:
		if x.wait(time.Duration(f.DelayMS) * time.Millisecond) {
			reset(x.w)
		}
		return
	case FaultGarbage:
		x.garbage()
		return
	}
	if x.emb != nil {
		x.st.add(x.lbl, func(c *Counter) { c.Generations++; c.InputTokens += x.prompt })
		if x.wait(x.m.cfg.TTFT) {
			x.embed()
		}
		return
	}
	tokens, finish := x.plan()
	x.st.add(x.lbl, func(c *Counter) { c.Generations++; c.InputTokens += x.prompt })
	if !x.wait(x.m.cfg.TTFT) {
		return
	}
	if x.rs != nil && x.afterCommit(tokens, finish) {
		return
	}
	if x.req.stream {
		x.stream(tokens, finish)
		return
	}
	if x.faultType() == FaultDropAfter {
		reset(x.w) // a cut before a non-streamed body is a reset
		return
	}
	ans := x.answerOf(tokens, finish)
	if len(ans.others) > 0 {
		x.countOut(ans.usage.output)
	} else {
		x.countOut(int64(len(tokens)))
	}
	b := x.c.body(x, ans)
	x.w.Header().Set("Content-Type", "application/json")
	x.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = x.w.Write(b)
}

// answerOf is the whole answer planned from tokens: the text, or the tool
// call when the mock calls one, with its usage — and, when the request
// asked for several choices, the others (planChoice), whose output the
// usage counts too.
func (x *exchange) answerOf(tokens []string, finish string) *answer {
	a, out := x.choiceAnswer(0, tokens, finish)
	for i := 1; i < x.req.choices; i++ {
		t, f := x.planChoice(i)
		o, n := x.choiceAnswer(i, t, f)
		out += n
		a.others = append(a.others, o)
	}
	a.usage = x.usage(out)
	return a
}

// choiceAnswer is choice i of an answer and its output tokens.
func (x *exchange) choiceAnswer(i int, tokens []string, finish string) (*answer, int64) {
	a := &answer{finish: finish}
	n := int64(len(tokens))
	if name, ok := x.req.tool(); ok {
		a.tool, a.finish = &toolCall{id: x.choiceToolCallID(i), name: name, args: strings.Join(toolArgs, "")}, finishTools
		n = int64(len(toolArgs))
	} else {
		a.text = strings.Join(tokens, "")
	}
	return a, n
}

// planChoice is the answer of choice i ≥ 1 of a request that asked for
// several: a text of its own, drawn from the prompt's key and i, as long
// as the first choice's.
func (x *exchange) planChoice(i int) ([]string, string) {
	n := x.m.cfg.Tokens
	finish := finishStop
	if mt := int(x.req.maxTokens); mt > 0 && mt < n {
		n, finish = mt, finishLength
	}
	return answerTokens(promptKey(x.m.cfg.Seed, x.req)^(uint64(i)*0x9E3779B97F4A7C15), x.m.cfg.Tokens)[:n], finish
}

// choiceToolCallID is the id of choice i's tool call.
func (x *exchange) choiceToolCallID(i int) string {
	if i == 0 {
		return x.toolCallID()
	}
	return x.toolCallID() + "_" + strconv.Itoa(i)
}

// plan decides the answer: the deterministic text (continued from a
// prefix when there is one), capped by max_tokens.
func (x *exchange) plan() ([]string, string) {
	n := x.m.cfg.Tokens
	limited := false
	if mt := int(x.req.maxTokens); mt > 0 && mt < n {
		n, limited = mt, true
	}
	full := answerTokens(promptKey(x.m.cfg.Seed, x.req), x.m.cfg.Tokens)
	tokens := full[:n]
	if x.req.continuation() {
		if rest, ok := continueTokens(full, x.req.turns[len(x.req.turns)-1].text); ok {
			tokens, limited = rest, false
			if mt := int(x.req.maxTokens); mt > 0 && mt < len(rest) {
				tokens, limited = rest[:mt], true
			}
		}
	}
	if limited {
		return tokens, finishLength
	}
	return tokens, finishStop
}

// wait sleeps d unless the client leaves or the mock closes; it reports
// whether to go on.
func (x *exchange) wait(d time.Duration) bool {
	if d <= 0 {
		return x.r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	return x.block(t.C)
}

// block waits for timer (nil: forever), the client leaving or the mock
// closing; it reports whether the timer fired.
func (x *exchange) block(timer <-chan time.Time) bool {
	select {
	case <-timer:
		return true
	case <-x.r.Context().Done():
		return false
	case <-x.m.closing:
		return false
	}
}

// usage is what the exchange reports: its prompt, out output tokens, and
// the cache reads and writes the mock is configured with.
func (x *exchange) usage(out int64) usage {
	reads := min(x.m.cfg.CachedTokens, x.prompt)
	return usage{input: x.prompt, output: out, cached: reads,
		cacheWrite: min(x.m.cfg.CacheWriteTokens, x.prompt-reads)}
}

// billPrompt counts a generation whose answer reports its prompt's usage
// though it says nothing (a blocked prompt, a guardrail's stop).
func (x *exchange) billPrompt() {
	x.st.add(x.lbl, func(c *Counter) { c.Generations++; c.InputTokens += x.prompt })
}

func (x *exchange) countOut(n int64) {
	x.out += n
	x.st.add(x.lbl, func(c *Counter) { c.OutputTokens += n })
}

// toolArgs are the deterministic arguments of the mock's tool call, in the
// three pieces a stream sends them as.
var toolArgs = []string{`{"query":`, ` "oncegate`, ` receipts"}`}

func (x *exchange) toolCallID() string { return x.c.toolPrefix() + x.id }

// garbage answers 200 with something that is not the protocol: an HTML
// page for a JSON request, events that are not JSON for a stream.
func (x *exchange) garbage() {
	if x.req.stream {
		x.w.Header().Set("Content-Type", "text/event-stream")
		x.w.WriteHeader(http.StatusOK)
		for i := 0; i < 3; i++ {
			_, _ = x.w.Write([]byte("data: <html>upstream proxy error</html>\n\n"))
		}
		return
	}
	x.w.Header().Set("Content-Type", "text/html")
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
}

// reset drops the connection without an HTTP response: the client sees a
// reset or EOF before (or, mid-stream, instead of the rest of) the body.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // RST rather than FIN
	}
	_ = conn.Close()
}

// Serve runs the mock on a listener until ctx ends.
func (m *Mock) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		m.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("mock serve: %w", err)
	}
	return nil
}
