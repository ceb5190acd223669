// Package demo plays docs/architecture.md's incident in a few seconds, with no files
// and no network beyond 127.0.0.1: a 3,100-token prompt; the primary first
// answers 429 with Retry-After, then drops its stream after 400 visible
// tokens; the mobile client times out and re-POSTs. It runs the same fault
// script twice — through a naive stack (client retry × gateway retry ×
// restart after output) and through oncegate — and prints what each cost
// and what the user saw, then oncegate's receipt, verified.
package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/gateway"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/policy"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The incident, compressed: 60 s of client patience become 0.9 s.
const (
	answerTokens  = 600
	dropAfter     = 400
	retryAfterMS  = "300"
	clientTimeout = 900 * time.Millisecond
	apiKey        = "sk-og-demo"
)

const configTemplate = `
tenants: [{id: demo, api_key_env: DEMO_KEY}]
providers:
  - {id: primary, type: openai, base_url: "PRIMARY/v1", timeouts: {connect: 1s, first_byte: 5s, idle: 2s}}
  - {id: fallback, type: anthropic, base_url: "FALLBACK", timeouts: {connect: 1s, first_byte: 5s, idle: 2s}}
routes:
  - id: primary
    provider: primary
    model: primary-llm
    release: primary-llm-2026-06
    capabilities: {input: [text], streaming: true, max_context_tokens: 128000, max_output_tokens: 4096, continuation: assistant_prefill}
    behavior_class: chat-general-v1
    data_boundary: external
    max_attempts: 3
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}
  - id: fallback
    provider: fallback
    model: fallback-llm
    release: fallback-llm-2026-03
    capabilities: {input: [text], streaming: true, max_context_tokens: 200000, max_output_tokens: 4096, continuation: assistant_prefill}
    behavior_class: chat-general-v1
    data_boundary: external
    max_attempts: 2
    price: {input_usd_per_mtok: 3, output_usd_per_mtok: 15}
models:
  - name: chat
    routes: [primary, fallback]
    retry: {max_attempts: 4, base_delay: 100ms, max_delay: 1s, retry_after_cap: 2s, jitter: full, deadline: 30s}
    stream: {after_output: resume}
`

// world is the demo's providers: fresh mocks with the incident's script.
type world struct {
	primary, fallback       *mock.Mock
	primaryURL, fallbackURL string
}

func incidentScript() mock.Script {
	return mock.Script{Rules: []mock.Rule{
		{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfterMS: retryAfterMS, RetryAfter: "1"}},
		{Calls: []int{2}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: dropAfter}},
	}}
}

func newWorld(ctx context.Context) (*world, error) {
	w := &world{
		primary:  mock.New(mock.Config{Seed: 1, Tokens: answerTokens, TTFT: 40 * time.Millisecond, TokenInterval: time.Millisecond, Script: incidentScript()}),
		fallback: mock.New(mock.Config{Seed: 2, Tokens: answerTokens, TTFT: 40 * time.Millisecond, TokenInterval: time.Millisecond}),
	}
	for _, m := range []struct {
		m   *mock.Mock
		url *string
	}{{w.primary, &w.primaryURL}, {w.fallback, &w.fallbackURL}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		go func() { _ = m.m.Serve(ctx, ln) }()
		*m.url = "http://" + ln.Addr().String()
	}
	return w, nil
}

// prompt is a 3,100-token conversation: retrieved context and the question.
func prompt() string {
	var b strings.Builder
	for b.Len() < 12_300 {
		b.WriteString("Context: the orchestrator read six prior turns, queried the vector store and composed this prompt. ")
	}
	b.WriteString("Question: summarise the incident for the on-call engineer.")
	return b.String()
}

func requestBody() string {
	return `{"model":"chat","stream":true,"messages":[{"role":"user","content":` + fmt.Sprintf("%q", prompt()) + `}]}`
}

// Run plays the incident twice and prints the comparison and the receipt.
func Run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sayMu sync.Mutex // the naive stack's two POSTs narrate at once
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(out, "  "+format+"\n", args...)
	}
	fmt.Fprintln(out, "oncegate demo — docs/architecture.md's incident, compressed into a few seconds")
	fmt.Fprintf(out, "  a %s-token prompt streams from the primary; the primary first answers 429 (Retry-After %sms),\n", "3,100", retryAfterMS)
	fmt.Fprintf(out, "  then drops its stream after %d visible tokens; the mobile client gives up after %v and re-POSTs.\n\n", dropAfter, clientTimeout)

	fmt.Fprintln(out, "▸ the naive stack (client retry × gateway retry × restart after output)")
	nw, err := newWorld(ctx)
	if err != nil {
		return err
	}
	naive := runNaive(ctx, nw, say)

	fmt.Fprintln(out, "\n▸ oncegate")
	ow, err := newWorld(ctx)
	if err != nil {
		return err
	}
	og, err := runOncegate(ctx, ow, say)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	printComparison(out, naive, og)
	fmt.Fprintln(out, "\noncegate's receipt (GET /v1/receipts/"+og.receipt.RequestID+"):")
	body, err := og.receipt.Indented()
	if err != nil {
		return err
	}
	_, _ = out.Write(body)
	if drifts := receipt.Verify(og.policy, og.receipt); len(drifts) > 0 {
		return fmt.Errorf("the receipt does not verify: %v", drifts)
	}
	fmt.Fprintf(out, "\nverify: OK — the retry engine replays to exactly these %d attempts (receipt sha256 %s…)\n",
		len(og.receipt.Attempts), og.receipt.ReceiptSHA256[:16])
	return og.check()
}

// outcome is what one stack did.
type outcome struct {
	upstreamCalls int64
	generations   int64
	tokensBilled  int64
	usageRecords  int
	answersToApp  int
	userSaw       string
	finalText     string
}

// oncegateOutcome is oncegate's outcome with its receipt.
type oncegateOutcome struct {
	outcome
	receipt *receipt.Receipt
	policy  *policy.Policy
	want    string
	dedup   string
}

func (o *oncegateOutcome) check() error {
	switch {
	case o.finalText != o.want:
		return fmt.Errorf("the user did not read the one expected answer")
	case o.receipt.Totals.BillableTokens != o.tokensBilled:
		return fmt.Errorf("billed %d tokens but the provider counted %d", o.receipt.Totals.BillableTokens, o.tokensBilled)
	case o.dedup != "joined" && o.dedup != "replayed":
		return fmt.Errorf("the re-POST was %q, not joined", o.dedup)
	}
	return nil
}

func runOncegate(ctx context.Context, w *world, say func(string, ...any)) (*oncegateOutcome, error) {
	dir, err := os.MkdirTemp("", "oncegate-demo")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	yaml := strings.NewReplacer("PRIMARY", w.primaryURL, "FALLBACK", w.fallbackURL).Replace(configTemplate)
	pol, err := policy.Parse("demo.yaml", []byte(yaml))
	if err != nil {
		return nil, err
	}
	secrets, err := pol.Config.ResolveSecrets(func(string) (string, bool) { return apiKey, true })
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	g, err := gateway.New(pol, secrets, gateway.Options{Ledger: st})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = g.Serve(gctx, ln) }()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	say("gateway with a SQLite ledger at %s; the mobile client sends Idempotency-Key: order-4711", filepath.Join(dir, "ledger.db"))

	headers := map[string]string{"Authorization": "Bearer " + apiKey, "Idempotency-Key": "order-4711"}
	first := startStream(ctx, url, requestBody(), headers, clientTimeout)
	say("POST 1 …")
	r1 := <-first
	say("POST 1: the client gave up after %v, having rendered %d characters", clientTimeout, len(r1.text))
	say("POST 2 (the re-POST, same key) …")
	r2 := <-startStream(ctx, url, requestBody(), headers, 20*time.Second)
	if r2.err != nil {
		return nil, fmt.Errorf("re-POST: %w", r2.err)
	}
	say("POST 2: X-Oncegate-Dedup: %s — read the same stream from its first byte: %d characters", r2.header.Get("X-Oncegate-Dedup"), len(r2.text))
	id := r2.header.Get("X-Oncegate-Request-Id")
	body, err := st.Receipt(ctx, "demo", id)
	if err != nil {
		return nil, fmt.Errorf("receipt %s: %w", id, err)
	}
	r, err := receipt.Parse(body)
	if err == nil {
		err = r.Seal()
	}
	if err != nil {
		return nil, err
	}
	for _, a := range r.Attempts {
		say("  attempt %d → %s (%s): %s%s, %d visible tokens", a.Ordinal, a.Route, a.Purpose, a.Kind, causeText(a), a.EmittedTokens)
	}
	ps, fs := w.primary.Stats(), w.fallback.Stats()
	o := &oncegateOutcome{receipt: r, policy: pol, dedup: r2.header.Get("X-Oncegate-Dedup"),
		want: expectedAnswer(1), outcome: outcome{upstreamCalls: ps.Requests + fs.Requests, generations: ps.Generations + fs.Generations,
			tokensBilled: ps.Billable() + fs.Billable(), usageRecords: 1, answersToApp: 1, finalText: r2.text}}
	o.userSaw = "one answer, never restarted"
	if r2.text != o.want {
		o.userSaw = "an answer that differs from the provider's text"
	}
	return o, nil
}

func causeText(a receipt.Attempt) string {
	switch {
	case a.RetryAfterMS != nil:
		return fmt.Sprintf(" (HTTP %d, Retry-After %dms)", a.HTTPStatus, *a.RetryAfterMS)
	case a.HTTPStatus != 0 && a.HTTPStatus != 200:
		return fmt.Sprintf(" (HTTP %d)", a.HTTPStatus)
	}
	return ""
}

// expectedAnswer is the primary's full deterministic answer to the prompt.
func expectedAnswer(seed int64) string {
	return mock.AnswerFor(seed, prompt(), answerTokens)
}

func printComparison(out io.Writer, naive outcome, og *oncegateOutcome) {
	rows := []struct{ what, n, o string }{
		{"upstream calls", fmt.Sprint(naive.upstreamCalls), fmt.Sprint(og.upstreamCalls)},
		{"generations billed", fmt.Sprint(naive.generations), fmt.Sprint(og.generations)},
		{"tokens billed", fmt.Sprint(naive.tokensBilled), fmt.Sprint(og.tokensBilled)},
		{"usage records", fmt.Sprintf("%d (one per provider call)", naive.usageRecords), "1 receipt, every attempt in it"},
		{"answers handed to the app", fmt.Sprint(naive.answersToApp), fmt.Sprint(og.answersToApp)},
		{"what the user saw", naive.userSaw, og.userSaw},
	}
	fmt.Fprintf(out, "%-27s %-50s %s\n", "", "naive stack", "oncegate")
	for _, r := range rows {
		fmt.Fprintf(out, "%-27s %-50s %s\n", r.what, r.n, r.o)
	}
	fmt.Fprintf(out, "%-27s %-50s %s\n", "billed = provider's count?", "—", fmt.Sprintf("yes: receipt %d = provider %d tokens", og.receipt.Totals.BillableTokens, og.tokensBilled))
}

// streamResult is what a client read.
type streamResult struct {
	text   string
	header http.Header
	err    error
}

// startStream posts a streamed request and reads its text until it ends or
// timeout passes (then the client hangs up, as the mobile app does).
func startStream(ctx context.Context, url, body string, headers map[string]string, timeout time.Duration) <-chan streamResult {
	ch := make(chan streamResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- streamResult{err: err}
			return
		}
		defer res.Body.Close()
		text, err := readText(res.Body)
		ch <- streamResult{text: text, header: res.Header, err: err}
	}()
	return ch
}
