package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
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
	// cache (capped at the prompt; OpenAI's protocol has no cache writes,
	// so it reports them as plain input). Default 0: no caching.
	CachedTokens     int64
	CacheWriteTokens int64
	Script           Script
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
	state  *rsState
	// traceparents: the last traceparent each request id came with.
	traceparents map[string]string
	closing      chan struct{}
	once         sync.Once
}

// New returns a mock provider.
func New(cfg Config) *Mock {
	if cfg.Tokens <= 0 {
		cfg.Tokens = 24
	}
	m := &Mock{cfg: cfg, stats: newStats(), script: cfg.Script, setAt: time.Now(), calls: map[string]int{}, counts: map[string]int{}, closing: make(chan struct{}),
		state: newRSState(), traceparents: map[string]string{}}
	m.mux = http.NewServeMux()
	m.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { m.serve(provider.OpenAI, w, r) })
	m.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { m.serve(provider.Anthropic, w, r) })
	m.mux.HandleFunc("POST /v1/responses", m.serveResponses)
	m.mux.HandleFunc("POST /v1/embeddings", m.serveEmbeddings)
	m.mux.HandleFunc("POST /v1/messages/count_tokens", m.countTokens)
	m.mux.HandleFunc("GET /v1/responses/{id}", m.getResponse)
	m.mux.HandleFunc("POST /v1/conversations", m.createConversation)
	m.mux.HandleFunc("GET /v1/conversations/{id}/items", m.listItems)
	m.mux.HandleFunc("DELETE /v1/conversations/{id}/items/{item}", m.deleteItem)
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
	proto  provider.Protocol
	w      http.ResponseWriter
	r      *http.Request
	req    *provider.Request
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
}

func (m *Mock) serve(proto provider.Protocol, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		return
	}
	cr, err := provider.ParseRequest(proto, body)
	if err != nil {
		writeError(w, proto, 400, "invalid_request_error", "", err.Error(), nil)
		return
	}
	var asked struct {
		Logprobs bool `json:"logprobs"`
	}
	_ = json.Unmarshal(body, &asked)
	if cr.IR.Thinking && prefilled(cr.IR) {
		// As Anthropic: extended thinking takes no prefill.
		writeError(w, proto, 400, "invalid_request_error", "", "assistant message prefill is not supported when thinking is enabled", nil)
		return
	}
	x := m.begin(proto, w, r, cr.IR, cr.PromptTokens)
	x.logprobs = asked.Logprobs && proto == provider.OpenAI
	x.finishServe()
}

// begin counts a generation request and matches it against the script.
func (m *Mock) begin(proto provider.Protocol, w http.ResponseWriter, r *http.Request, ir *provider.Request, prompt int64) *exchange {
	x := &exchange{m: m, proto: proto, w: w, r: r, req: ir, prompt: prompt,
		lbl: labels{key: r.Header.Get("Idempotency-Key"), reqID: r.Header.Get("X-Oncegate-Request-Id"), model: ir.Model}}
	cont := len(ir.Messages) > 0 && isPrefix(&ir.Messages[len(ir.Messages)-1])
	m.mu.Lock()
	if tp := r.Header.Get("traceparent"); tp != "" && x.lbl.reqID != "" {
		m.traceparents[x.lbl.reqID] = tp
	}
	m.calls[ir.Model]++
	m.ids++
	x.st, x.id = m.stats, strconv.FormatInt(m.ids, 10)
	c := call{model: ir.Model, key: x.lbl.key, n: m.calls[ir.Model], continuation: cont, since: time.Since(m.setAt)}
	for i := range m.script.Rules {
		if m.script.Rules[i].matches(c, i) {
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
		c.MaxTokensAsked = max(c.MaxTokensAsked, ir.MaxTokens)
		if ir.MaxTokens == 0 {
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
	f := x.fault
	switch x.faultType() {
	case FaultStatus, FaultContextLength, FaultContentPolicy, FaultQuota, FaultRejectPrefill:
		x.errorResponse(f)
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
	if x.req.Stream {
		x.stream(tokens, finish)
		return
	}
	if x.faultType() == FaultDropAfter {
		reset(x.w) // a cut before a non-streamed body is a reset
		return
	}
	x.countOut(int64(len(tokens)))
	if x.rs != nil {
		x.w.Header().Set("Content-Type", "application/json")
		_, _ = x.w.Write(x.commit(tokens, finish, "", true))
		return
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.w.Header().Set("x-request-id", "req_mock"+x.id)
	_, _ = x.w.Write(x.completeBody(tokens, finish))
}

// plan decides the answer: a tool call when tools are offered and the last
// turn is the user's, otherwise the deterministic text (continued from a
// prefix when there is one), capped by max_tokens.
func (x *exchange) plan() ([]string, string) {
	n := x.m.cfg.Tokens
	limited := false
	if mt := int(x.req.MaxTokens); mt > 0 && mt < n {
		n, limited = mt, true
	}
	full := answerTokens(promptKey(x.m.cfg.Seed, x.req), x.m.cfg.Tokens)
	tokens := full[:n]
	if msgs := x.req.Messages; len(msgs) > 0 && isPrefix(&msgs[len(msgs)-1]) {
		if rest, ok := continueTokens(full, msgs[len(msgs)-1].Text()); ok {
			tokens, limited = rest, false
			if mt := int(x.req.MaxTokens); mt > 0 && mt < len(rest) {
				tokens, limited = rest[:mt], true
			}
		}
	}
	if limited {
		return tokens, provider.FinishLength
	}
	return tokens, provider.FinishStop
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
func (x *exchange) usage(out int64) gw.Usage {
	reads := min(x.m.cfg.CachedTokens, x.prompt)
	return gw.Usage{InputTokens: x.prompt, OutputTokens: out, CachedTokens: reads,
		CacheWriteTokens: min(x.m.cfg.CacheWriteTokens, x.prompt-reads)}
}

func (x *exchange) countOut(n int64) {
	x.out += n
	x.st.add(x.lbl, func(c *Counter) { c.OutputTokens += n })
}

func (x *exchange) wantsTool() (provider.Tool, bool) {
	r := x.req
	if len(r.Tools) == 0 || (r.ToolChoice != nil && r.ToolChoice.Mode == provider.ToolNone) {
		return provider.Tool{}, false
	}
	if n := len(r.Messages); n == 0 || r.Messages[n-1].Role != provider.RoleUser {
		return provider.Tool{}, false
	}
	t := r.Tools[0]
	if tc := r.ToolChoice; tc != nil && tc.Mode == provider.ToolNamed {
		for _, cand := range r.Tools {
			if cand.Name == tc.Name {
				t = cand
			}
		}
	}
	return t, true
}

// toolArgs are the deterministic arguments of the mock's tool call, in the
// three pieces a stream sends them as.
var toolArgs = []string{`{"query":`, ` "oncegate`, ` receipts"}`}

func (x *exchange) toolCallID() string {
	if x.proto == provider.Anthropic {
		return "toolu_mock" + x.id
	}
	return "call_mock" + x.id
}

func (x *exchange) completeBody(tokens []string, finish string) []byte {
	resp := &provider.Response{ID: "mock-" + x.id, Model: x.req.Model, Created: time.Now().Unix(), Finish: finish}
	if t, ok := x.wantsTool(); ok {
		args := ""
		for _, a := range toolArgs {
			args += a
		}
		resp.ToolCalls, resp.Finish = []provider.ToolCall{{ID: x.toolCallID(), Name: t.Name, Arguments: args}}, provider.FinishToolCalls
		resp.Usage.OutputTokens = int64(len(toolArgs))
	} else {
		for _, t := range tokens {
			resp.Text += t
		}
		resp.Usage.OutputTokens = int64(len(tokens))
	}
	resp.Usage = x.usage(resp.Usage.OutputTokens)
	id := "chatcmpl-mock" + x.id
	if x.proto == provider.Anthropic {
		id = "msg_mock" + x.id
	}
	return provider.EncodeResponse(x.proto, resp, id)
}

// garbage answers 200 with something that is not the protocol: an HTML
// page for a JSON request, events that are not JSON for a stream.
func (x *exchange) garbage() {
	if x.req.Stream {
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

// errorResponse writes the provider's error for a status fault.
func (x *exchange) errorResponse(f *Fault) {
	status, typ, code, msg := f.Status, f.ErrorType, f.ErrorCode, f.Message
	switch f.Type {
	case FaultContextLength:
		status, code = 400, "context_length_exceeded"
		typ, msg = "invalid_request_error", "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."
		if x.proto == provider.Anthropic {
			msg = "prompt is too long: 210000 tokens > 200000 maximum"
		}
	case FaultContentPolicy:
		status, typ, code = 400, "invalid_request_error", "content_policy_violation"
		msg = "Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system."
		if x.proto == provider.Anthropic {
			msg = "Output blocked by content filtering policy"
		}
	case FaultQuota:
		status, typ, code = 429, "insufficient_quota", "insufficient_quota"
		msg = "You exceeded your current quota, please check your plan and billing details."
	case FaultRejectPrefill:
		status, typ = 400, "invalid_request_error"
		msg = "This model does not support assistant message prefill. The conversation must end with a user message."
	}
	if status == 0 {
		status = 500
	}
	if typ == "" {
		typ, code = defaultErrorType(x.proto, status)
	}
	if msg == "" {
		msg = http.StatusText(status)
		if status == 529 {
			msg = "Overloaded"
		}
	}
	h := http.Header{}
	if f.RetryAfter != "" {
		h.Set("Retry-After", f.RetryAfter)
	}
	if f.RetryAfterMS != "" {
		h.Set("retry-after-ms", f.RetryAfterMS)
	}
	writeError(x.w, x.proto, status, typ, code, msg, h)
}

// defaultErrorType names the error each provider sends for a status.
func defaultErrorType(p provider.Protocol, status int) (typ, code string) {
	if p == provider.Anthropic {
		switch status {
		case 429:
			return "rate_limit_error", ""
		case 529:
			return "overloaded_error", ""
		case 401:
			return "authentication_error", ""
		case 404:
			return "not_found_error", ""
		}
		if status >= 500 {
			return "api_error", ""
		}
		return "invalid_request_error", ""
	}
	switch {
	case status == 429:
		return "requests", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

func writeError(w http.ResponseWriter, p provider.Protocol, status int, typ, code, msg string, h http.Header) {
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	var body any
	if p == provider.Anthropic {
		body = map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}, "request_id": "req_mock"}
	} else {
		var c any
		if code != "" {
			c = code
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
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

// prefilled reports whether a request ends with an assistant message: a
// prefill the model is to continue.
func prefilled(r *provider.Request) bool {
	n := len(r.Messages)
	return n > 0 && r.Messages[n-1].Role == provider.RoleAssistant && len(r.Messages[n-1].ToolCalls) == 0
}
