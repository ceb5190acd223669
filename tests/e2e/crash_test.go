// Package e2e holds black-box tests of the built oncegate binary: it runs
// as a subprocess against the mock provider over real HTTP, and is killed
// with SIGKILL to prove what survives a crash.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/coord/redis/redistest"
	"github.com/oncegate/oncegate/internal/ledger/postgres/pgtest"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/receipt"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oncegate-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "oncegate")
	// -s -w: no symbol table or DWARF, which a cold build cache spends
	// seconds of CPU writing and nothing here reads (a panic's trace
	// comes from the runtime's own tables).
	build := exec.Command("go", "build", "-tags", "failpoints", "-ldflags", "-s -w", "-o", binary, "../../cmd/oncegate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic("build the binary: " + err.Error())
	}
	code := redistest.Main(m) // runs the tests, then stops the Redis deployments they started
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// readSources reads every Go file of the module. The binary these tests
// run is built from them in TestMain, out of the go command's sight: a
// file a test opens is part of the test cache's key, so an edit anywhere
// reruns these tests instead of replaying an old pass. (Only what tests
// open counts, not TestMain: newWorld calls it.)
func readSources(root string) {
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
			_, _ = os.ReadFile(path)
		}
		return nil
	})
}

const apiKey = "sk-og-e2e-tenant"

// adminKey is the admin key of configurations that set admin_key_env.
const adminKey = "sk-og-e2e-admin"

const configTemplate = `
tenants: [{id: e2e, api_key_env: ONCEGATE_E2E_KEY}]
providers: [{id: mock, type: openai, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}]
routes:
  - {id: mock, provider: mock, model: mock-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: chat, routes: [mock], retry: {max_attempts: 2, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
lease: {ttl: 2s, renew: 500ms}
`

// world is a mock provider and a configuration pointing at it, with a
// store that outlives gateway processes: a SQLite file (db), or the
// PostgreSQL schema store names.
type world struct {
	t      *testing.T
	mock   *mock.Mock
	config string
	db     string
	store  string
}

// backend is where a test's gateways keep their ledger ("": a SQLite
// file of the test's own) and how durably (ledger.sync; "": the default).
type backend struct{ store, sync string }

// backends runs a crash test on each store — SQLite, and PostgreSQL when
// ONCEGATE_TEST_POSTGRES names one (pgtest skips the subtest otherwise) —
// at each durability: what a crash of the process may not lose is the
// same at both.
func backends(t *testing.T, test func(t *testing.T, b backend)) {
	for _, sync := range []string{"full", "normal"} {
		t.Run("sqlite/"+sync, func(t *testing.T) { test(t, backend{sync: sync}) })
		t.Run("postgres/"+sync, func(t *testing.T) { test(t, backend{store: pgtest.URL(t), sync: sync}) })
	}
}

// ledgerLine is the configuration's ledger section for b ("" for the
// default).
func (b backend) ledgerLine() string {
	if b.sync == "" {
		return ""
	}
	return "\nledger: {sync: " + b.sync + "}\n"
}

func newWorld(t *testing.T, mcfg mock.Config) *world { return newWorldOn(t, mcfg, backend{}) }

// newWorldOn is newWorld on backend b.
func newWorldOn(t *testing.T, mcfg mock.Config, b backend) *world {
	store := b.store
	readSources("../..")
	m := mock.New(mcfg)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	t.Cleanup(m.Close)
	dir := t.TempDir()
	w := &world{t: t, mock: m, config: filepath.Join(dir, "oncegate.yaml"), db: filepath.Join(dir, "ledger.db"), store: store}
	if store == "" {
		w.store = "sqlite://" + w.db
	}
	if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(configTemplate, "MOCK", srv.URL)+b.ledgerLine()), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// gateway is a running oncegate process.
type gateway struct {
	cmd    *exec.Cmd
	url    string
	stdout *lines
	stderr *lines
}

// lines collects a process's output and lets a test wait for a line.
type lines struct {
	mu   sync.Mutex
	all  []string
	seen chan struct{}
}

func (l *lines) add(s string) {
	l.mu.Lock()
	l.all = append(l.all, s)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default:
	}
}

func (l *lines) wait(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for _, s := range l.all {
			if m := re.FindStringSubmatch(s); m != nil {
				l.mu.Unlock()
				return m
			}
		}
		l.mu.Unlock()
		select {
		case <-l.seen:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no line matching %s; output:\n%s", re, strings.Join(l.all, "\n"))
		}
	}
}

func pipe(r io.Reader, l *lines) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.add(sc.Text())
	}
}

var listening = regexp.MustCompile(`oncegate listening on (http://\S+)`)

func (w *world) start(env ...string) *gateway {
	w.t.Helper()
	return startServe(w.t, []string{"--config", w.config, "--store", w.store}, append([]string{"ONCEGATE_E2E_KEY=" + apiKey}, env...))
}

// startServe runs `oncegate serve` with args (and --listen on a free
// port) and env, waits until it listens, and kills it when the test ends
// — logging its stderr but for INFO lines if the test failed.
func startServe(t *testing.T, args, env []string) *gateway {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.StdoutPipe()
	errp, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout := &lines{seen: make(chan struct{}, 1)}
	g := &gateway{cmd: cmd, stdout: stdout, stderr: &lines{seen: make(chan struct{}, 1)}}
	go pipe(out, stdout)
	go pipe(errp, g.stderr)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			g.stderr.mu.Lock()
			var notable []string
			for _, l := range g.stderr.all {
				if !strings.Contains(l, `"level":"INFO"`) {
					notable = append(notable, l)
				}
			}
			t.Logf("gateway %s: %d lines on stderr, these not INFO:\n%s", g.url, len(g.stderr.all), strings.Join(notable, "\n"))
			g.stderr.mu.Unlock()
		}
	})
	g.url = stdout.wait(t, listening, 30*time.Second)[1]
	return g
}

// kill sends SIGKILL: no shutdown, no flush.
func (g *gateway) kill(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = g.cmd.Wait()
}

func (g *gateway) post(ctx context.Context, key, content string) (*http.Response, []byte, error) {
	body := `{"model":"chat","messages":[{"role":"user","content":` + fmt.Sprintf("%q", content) + `}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

func (g *gateway) receipt(t *testing.T, id string) (*receipt.Receipt, int) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+"/v1/receipts/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return nil, res.StatusCode
	}
	var r receipt.Receipt
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return &r, 200
}

// afterCrash checks a request killed mid-flight: after a restart it is
// indeterminate, never re-sent, and its key answers 502 outcome_unknown —
// at once on SQLite (the restarted process holds the file, so the dead
// one's leases end), once the dead process's lease lapsed on PostgreSQL
// (another gateway might still hold it: 409 until then). Its receipt,
// rebuilt from the event log, has every attempt (the last one in flight)
// and passes oncegate verify.
func afterCrash(t *testing.T, w *world, key string, upstreamBefore int64, attempts int) {
	afterCrashOf(t, w, key, upstreamBefore, attempts, func(g *gateway) (*http.Response, []byte, error) {
		return g.post(context.Background(), key, "hello")
	})
}

// afterCrashOf is afterCrash for a request that send sends again.
func afterCrashOf(t *testing.T, w *world, key string, upstreamBefore int64, attempts int, send func(*gateway) (*http.Response, []byte, error)) {
	g2 := w.start()
	var res *http.Response
	var body []byte
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, body, err = send(g2)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 409 || strings.HasPrefix(w.store, "sqlite://") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.StatusCode != 502 || !strings.Contains(string(body), "outcome_unknown") || res.Header.Get("x-should-retry") != "false" {
		t.Fatalf("same key after the crash: %d %s", res.StatusCode, body)
	}
	if n := w.mock.Stats().Requests; n != upstreamBefore {
		t.Fatalf("the upstream saw %d calls after the crash, %d before: a blind re-dispatch", n, upstreamBefore)
	}
	id := res.Header.Get("X-Oncegate-Request-Id")
	r, status := g2.receipt(t, id)
	if status != 200 || r.Terminal != "indeterminate" || len(r.Attempts) != attempts || r.Attempts[attempts-1].Kind != "unknown_provider_acceptance" ||
		r.Attempts[attempts-1].CostUSD <= 0 {
		t.Fatalf("receipt after recovery (%d): %+v", status, r)
	}
	w.verify(t, g2, id)
}

// verify runs `oncegate verify` over a receipt the gateway serves.
func (w *world) verify(t *testing.T, g *gateway, id string) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.url+"/v1/receipts/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	path := filepath.Join(t.TempDir(), id+".json")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "verify", "--config", w.config, path).CombinedOutput()
	if err != nil {
		t.Fatalf("oncegate verify of receipt %s: %v\n%s\n%s", id, err, out, body)
	}
}

// (a) The gateway dies while an attempt hangs upstream.
func TestCrashWhileAnAttemptHangs(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{}, b)
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultHang}}}})
		g := w.start()
		go func() { _, _, _ = g.post(context.Background(), "crash-a", "hello") }()
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.Stats().Requests == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the attempt never reached the mock")
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.kill(t)
		w.mock.SetScript(mock.Script{}) // the provider is healthy now: a blind retry would succeed
		afterCrash(t, w, "crash-a", 1, 1)
	})
}

// (a') The gateway dies while a retry hangs upstream: the rebuilt receipt
// has the failed attempt and the one in flight, with the jitter the
// decision that scheduled it drew, and verifies.
func TestCrashWhileARetryHangs(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{}, b)
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{
			{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}},
			{Calls: []int{2}, Fault: mock.Fault{Type: mock.FaultHang}},
		}})
		g := w.start()
		go func() { _, _, _ = g.post(context.Background(), "crash-retry", "hello") }()
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.Stats().Requests < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the retry never reached the mock")
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.kill(t)
		w.mock.SetScript(mock.Script{})
		afterCrash(t, w, "crash-retry", 2, 2)
	})
}

// (b) The gateway dies after attempt_dispatched is committed but before the
// request's bytes are sent.
func TestCrashAfterDispatchCommitBeforeSend(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{}, b)
		g := w.start("ONCEGATE_FAILPOINT=after_dispatch_commit")
		go func() { _, _, _ = g.post(context.Background(), "crash-b", "hello") }()
		g.stderr.wait(t, regexp.MustCompile(`ONCEGATE_FAILPOINT after_dispatch_commit reached`), 10*time.Second)
		g.kill(t)
		if n := w.mock.Stats().Requests; n != 0 {
			t.Fatalf("the failpoint is before the send, yet the mock saw %d calls", n)
		}
		afterCrash(t, w, "crash-b", 0, 1)
	})
}

// (c) The gateway dies during group commit under load: every request
// acknowledged to a client before the kill still has its receipt.
func TestCrashDuringGroupCommitKeepsAcknowledgedReceipts(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{Tokens: 4}, b)
		g := w.start()
		var mu sync.Mutex
		acked := map[string]string{} // key → request id
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c := 0; c < 32; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					key := fmt.Sprintf("load-%d-%d", c, i)
					res, _, err := g.post(ctx, key, key)
					if err == nil && res.StatusCode == 200 {
						mu.Lock()
						acked[key] = res.Header.Get("X-Oncegate-Request-Id")
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		g.kill(t)
		stop()
		wg.Wait()
		if len(acked) < 50 {
			t.Fatalf("only %d requests acknowledged before the kill: the load was too light to test group commit", len(acked))
		}
		g2 := w.start()
		for key, id := range acked {
			r, status := g2.receipt(t, id)
			if status != 200 || r.Terminal != "succeeded" {
				t.Fatalf("acknowledged request %s (%s) lost its receipt (%d)", key, id, status)
			}
			res, _, err := g2.post(context.Background(), key, key)
			if err != nil || res.Header.Get("X-Oncegate-Dedup") != "replayed" {
				t.Fatalf("acknowledged request %s does not replay after the crash", key)
			}
		}
		t.Logf("%d acknowledged requests survived the kill with their receipts", len(acked))
	})
}
