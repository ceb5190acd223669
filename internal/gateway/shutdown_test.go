package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
)

// Shutdown drains: a stream in flight when the gateway is told to stop
// runs to its end, and new connections are refused.
func TestGracefulShutdownDrainsStreams(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30, TokenInterval: 15 * time.Millisecond}}, func(t *testing.T, e *env) {
		// A second gateway on the same policy, so this test controls its life.
		g := e.gw
		ln, err := e.mem.Listen("second.test:80")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { _ = g.Serve(ctx, ln); close(stopped) }()
		url := "http://second.test"
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(chatBody("chat", true)))
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		cancel() // stop while the stream is in flight
		body, err := io.ReadAll(res.Body)
		if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("the in-flight stream was cut: %v\n%s", err, body)
		}
		select {
		case <-stopped:
		case <-time.After(3 * time.Second):
			t.Fatal("Serve did not return after draining")
		}
		if _, err := e.client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader("{}")); err == nil {
			t.Fatal("a stopped gateway accepted a new connection")
		}
	})
}

func TestHealthAndModels(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{}}, func(t *testing.T, e *env) {
		for _, path := range []string{"/healthz", "/readyz"} {
			res, err := e.client.Get(e.url + path)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("%s: %v %v", path, res.StatusCode, err)
			}
		}
		get := func(key string, anthropic bool) (int, string) {
			req, _ := http.NewRequest("GET", e.url+"/v1/models", nil)
			if anthropic {
				req.Header.Set("x-api-key", key)
				req.Header.Set("anthropic-version", "2023-06-01")
			} else {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			res, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		if code, body := get(keyAcme, false); code != 200 || !strings.Contains(body, `"id":"chat"`) || !strings.Contains(body, `"id":"claude"`) {
			t.Fatalf("acme models %d %s", code, body)
		}
		// globex may only send data to private routes: claude (external only) is hidden.
		if code, body := get(keyGlobex, true); code != 200 || strings.Contains(body, `"id":"claude"`) || !strings.Contains(body, `"id":"solo"`) || !strings.Contains(body, `"has_more":false`) {
			t.Fatalf("globex models %d %s", code, body)
		}
		if code, _ := get("nope", false); code != 401 {
			t.Fatalf("bad key: %d", code)
		}
	})
}

func TestReceiptsAreTenantScoped(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 3}}, func(t *testing.T, e *env) {
		res, _ := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		id := res.Header.Get("X-Oncegate-Request-Id")
		e.receipt(id)
		req, _ := http.NewRequest("GET", e.url+"/v1/receipts/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+keyGlobex)
		other, err := e.client.Do(req)
		if err != nil || other.StatusCode != 404 {
			t.Fatalf("another tenant saw the receipt: %v %v", other.StatusCode, err)
		}
		req, _ = http.NewRequest("GET", e.url+"/v1/receipts?limit=5", nil)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		list, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(list.Body)
		if list.StatusCode != 200 || !strings.Contains(string(b), id) {
			t.Fatalf("list %d %s", list.StatusCode, b)
		}
	})
}

// faulty is a store whose writes fail while fail is set (a full disk);
// failFinish fails only terminal commits.
type faulty struct {
	ledger.Store
	fail, failFinish atomic.Bool
}

var errDiskFull = errors.New("database or disk is full")

func (f *faulty) Claim(ctx context.Context, r *ledger.Record, evs []ledger.Event) (*ledger.Record, bool, error) {
	if f.fail.Load() {
		return nil, false, errDiskFull
	}
	return f.Store.Claim(ctx, r, evs)
}

func (f *faulty) Finish(ctx context.Context, fin *ledger.Finish) error {
	if f.fail.Load() || f.failFinish.Load() {
		return errDiskFull
	}
	return f.Store.Finish(ctx, fin)
}

func (f *faulty) Ping(ctx context.Context) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.Ping(ctx)
}

// A store that cannot be written: requests get 503 store_unavailable
// (retryable, nothing was sent), /readyz fails while commits fail, and
// both recover by themselves when the store can be written again.
func TestAStoreThatCannotBeWritten(t *testing.T) {
	t.Parallel()
	var f *faulty
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, wrap: func(s ledger.Store) ledger.Store {
		f = &faulty{Store: s}
		return f
	}}, func(t *testing.T, e *env) {
		ready := func() int {
			res, err := e.client.Get(e.url + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		f.fail.Store(true)
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		if res.StatusCode != 503 || !strings.Contains(string(body), api.CodeStoreUnavailable) || res.Header.Get("x-should-retry") != "true" {
			t.Fatalf("while the store cannot be written: %d %s %v", res.StatusCode, body, res.Header)
		}
		if got := ready(); got != 503 {
			t.Fatalf("/readyz %d while commits fail", got)
		}
		if n := e.primary.Stats().Requests; n != 0 {
			t.Fatalf("the provider saw %d requests", n)
		}
		f.fail.Store(false)
		if got := ready(); got != 200 {
			t.Fatalf("/readyz %d once the store can be written", got)
		}
		if res, body := e.post("/v1/chat/completions", chatBody("chat", false), nil); res.StatusCode != 200 {
			t.Fatalf("after: %d %s", res.StatusCode, body)
		}
	})
}

// A stream already started whose terminal cannot be committed ends with
// the protocol's in-band error — never a bare JSON line, never a success
// the gateway could not record — naming the terminal its receipt gets
// once the lease lapsed: indeterminate.
func TestAStartedStreamThatCannotFinishEndsInBand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, body, errorLine, done string
	}{
		{"/v1/chat/completions", chatBody("chat", true), "data: {\"error\":", "[DONE]"},
		{"/v1/messages", `{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "event: error\n", "message_stop"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var f *faulty
			inBubble(t, envOptions{mock: mock.Config{Tokens: 6}, yaml: "lease: {ttl: 1s, renew: 300ms}\n",
				wrap: func(s ledger.Store) ledger.Store {
					f = &faulty{Store: s}
					return f
				}}, func(t *testing.T, e *env) {
				f.failFinish.Store(true)
				res, body := e.post(tc.path, tc.body, nil)
				text := string(body)
				if res.StatusCode != 200 || !strings.Contains(text, tc.errorLine) || strings.Contains(text, tc.done) ||
					!strings.Contains(text, `"terminal":"indeterminate"`) || strings.Contains(text, `"succeeded"`) {
					t.Fatalf("%d\n%s", res.StatusCode, text)
				}
				for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
					if line != "" && !strings.HasPrefix(line, "data: ") && !strings.HasPrefix(line, "event: ") && !strings.HasPrefix(line, ":") {
						t.Fatalf("a line outside the SSE framing: %q\n%s", line, text)
					}
				}
				f.failFinish.Store(false)
				id := res.Header.Get("X-Oncegate-Request-Id")
				r := e.awaitReceipt(id)
				if r.Terminal != "indeterminate" {
					t.Fatalf("the stream said indeterminate, the receipt %s", r.Terminal)
				}
			})
		})
	}
}
