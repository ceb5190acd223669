package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/breaker"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

func keyed(key string) map[string]string { return map[string]string{"Idempotency-Key": key} }

// 200 concurrent identical keyed requests: one upstream call, 200
// byte-identical answers.
func TestConcurrentDuplicatesMakeOneUpstreamCall(t *testing.T) {
	t.Parallel()
	// The first request stays in flight while the others arrive; its
	// first byte comes well inside the routes' 400 ms first-byte timeout,
	// which a loaded CI machine under -race once pushed a 300 ms one past
	// (a timed-out attempt and its retry: two upstream calls).
	inBubble(t, envOptions{mock: mock.Config{Tokens: 10, TTFT: 150 * time.Millisecond}}, func(t *testing.T, e *env) {
		const n = 200
		bodies := make([][]byte, n)
		dedup := make([]string, n)
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, body := e.post("/v1/chat/completions", chatBody("chat", false), keyed("order-42"))
				if res.StatusCode != 200 {
					t.Errorf("status %d: %s", res.StatusCode, body)
				}
				bodies[i], dedup[i], ids[i] = body, res.Header.Get("X-Oncegate-Dedup"), res.Header.Get("X-Oncegate-Request-Id")
			}()
		}
		wg.Wait()
		if got := e.primary.Stats().Requests + e.fallback.Stats().Requests; got != 1 {
			var kinds []string
			for _, a := range e.receipt(ids[0]).Attempts {
				kinds = append(kinds, a.Kind)
			}
			t.Fatalf("%d upstream calls for 200 identical keyed requests (the receipt's attempts: %v)", got, kinds)
		}
		count := map[string]int{}
		for i := range bodies {
			if !bytes.Equal(bodies[i], bodies[0]) || ids[i] != ids[0] {
				t.Fatalf("answer %d differs", i)
			}
			count[dedup[i]]++
		}
		if count["miss"] != 1 || count["joined"]+count["replayed"] != n-1 {
			t.Fatalf("dedup outcomes %v", count)
		}
		var last receipt.Dedup
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := e.receipt(ids[0])
			if last = r.Dedup; last.Joined == count["joined"] && last.Replayed == count["replayed"] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the receipt counts %+v, the clients %v", last, count)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Streams: every client reads the identical full text, including clients
// that join halfway through.
func TestStreamJoinersReadTheWholeStream(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 40, TokenInterval: 10 * time.Millisecond}}, func(t *testing.T, e *env) {
		want := answer(t, provider.OpenAI, prompt, 40)
		const n = 50
		texts := make([]string, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i%10) * 30 * time.Millisecond) // some join well into the stream
				var h http.Header
				c := e.openai(&h)
				st := c.Chat.Completions.NewStreaming(context.Background(), oaParams("chat", prompt), oopt("Idempotency-Key", "stream-7"))
				var sb strings.Builder
				for st.Next() {
					if ch := st.Current(); len(ch.Choices) > 0 {
						sb.WriteString(ch.Choices[0].Delta.Content)
					}
				}
				if err := st.Err(); err != nil {
					t.Error(err)
				}
				texts[i] = sb.String()
			}()
		}
		wg.Wait()
		for i, s := range texts {
			if s != want {
				t.Fatalf("client %d read\n%q\nwant\n%q", i, s, want)
			}
		}
		if got := e.primary.Stats().Requests; got != 1 {
			t.Fatalf("%d upstream calls", got)
		}
	})
}

// The mobile client of seed 000: a keyless re-POST while the first is still
// streaming joins it.
func TestKeylessRePostJoinsTheStreamInFlight(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30, TokenInterval: 15 * time.Millisecond}}, testKeylessRePostJoins)
}

func testKeylessRePostJoins(t *testing.T, e *env) {
	first := make(chan string)
	go func() {
		_, body := e.rawStream("chat", nil)
		first <- body
	}()
	time.Sleep(150 * time.Millisecond) // the first request is mid-stream
	res, second := e.rawStream("chat", nil)
	if res.Header.Get("X-Oncegate-Dedup") != "joined" {
		t.Fatalf("dedup %q", res.Header.Get("X-Oncegate-Dedup"))
	}
	if one := <-first; one != second {
		t.Fatalf("the re-POST read a different stream:\n%s\n---\n%s", one, second)
	}
	if got := e.primary.Stats().Requests; got != 1 {
		t.Fatalf("%d upstream calls", got)
	}
	// The same question asked again later is a new request.
	res, _ = e.rawStream("chat", nil)
	if res.Header.Get("X-Oncegate-Dedup") != "miss" || e.primary.Stats().Requests != 2 {
		t.Fatalf("later identical request: dedup %q, upstream %d", res.Header.Get("X-Oncegate-Dedup"), e.primary.Stats().Requests)
	}
}

// The official SDK with a timeout shorter than the upstream's latency gives
// up and retries on its own: one upstream generation, and its final
// attempt receives the answer.
func TestSDKTimeoutRetryJoinsInsteadOfPayingTwice(t *testing.T) {
	t.Parallel()
	// The upstream takes 250 ms (well inside the gateway's 400 ms
	// first-byte timeout, even on a loaded machine); the SDK gives up after
	// 100 ms and retries on its own.
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8, TTFT: 250 * time.Millisecond}}, func(t *testing.T, e *env) {
		var h http.Header
		c := e.anthropicClient(&h, aopt.WithRequestTimeout(100*time.Millisecond), aopt.WithMaxRetries(4))
		res, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "chat", MaxTokens: 50,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Content) == 0 || res.Content[0].Text == "" {
			t.Fatalf("no answer: %+v", res)
		}
		if g := e.primary.Stats().Generations; g != 1 {
			t.Fatalf("%d upstream generations", g)
		}
		waitFor(t, func() bool {
			r := e.receipt(h.Get("X-Oncegate-Request-Id"))
			return r.ClientRetryCount >= 1 && r.Dedup.Joined+r.Dedup.Replayed >= 1 && len(r.Attempts) == 1
		})
		if d := h.Get("X-Oncegate-Dedup"); d != "joined" && d != "replayed" {
			t.Fatalf("the SDK's final attempt was %q", d)
		}
	})
}

func TestReplayAndKeyReuse(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6}}, func(t *testing.T, e *env) {
		res1, body1 := e.post("/v1/chat/completions", chatBody("chat", false), keyed("k-1"))
		res2, body2 := e.post("/v1/chat/completions", chatBody("chat", false), keyed("k-1"))
		if res2.Header.Get("X-Oncegate-Dedup") != "replayed" || !bytes.Equal(body1, body2) ||
			res2.Header.Get("X-Oncegate-Request-Id") != res1.Header.Get("X-Oncegate-Request-Id") {
			t.Fatalf("replay: %v %q", res2.Header, body2)
		}
		if n := e.primary.Stats().Requests; n != 1 {
			t.Fatalf("%d upstream calls", n)
		}
		// A different body with the same key: 422, no upstream call.
		res3, body3 := e.post("/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"something else"}]}`, keyed("k-1"))
		if res3.StatusCode != 422 || !strings.Contains(string(body3), api.CodeKeyReused) || res3.Header.Get("x-should-retry") != "false" {
			t.Fatalf("reuse: %d %s", res3.StatusCode, body3)
		}
		// Key order and whitespace do not make a different request.
		res4, _ := e.post("/v1/chat/completions", `{ "messages":[{"content":"What is a logical request?","role":"user"}], "stream":false, "model":"chat" }`, keyed("k-1"))
		if res4.StatusCode != 200 || res4.Header.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("reordered body: %d %s", res4.StatusCode, res4.Header.Get("X-Oncegate-Dedup"))
		}
		if n := e.primary.Stats().Requests; n != 1 {
			t.Fatalf("%d upstream calls", n)
		}
		// A stream replays as the same SSE bytes.
		_, s1 := e.rawStream("chat", keyed("k-2"))
		res5, s2 := e.rawStream("chat", keyed("k-2"))
		if s1 != s2 || res5.Header.Get("X-Oncegate-Dedup") != "replayed" || res5.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream replay differs")
		}
		// A terminal error replays too (Stripe semantics): no new upstream call.
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 400, Message: "bad"})))
		r1, b1 := e.post("/v1/chat/completions", chatBody("chat", false), keyed("k-3"))
		r2, b2 := e.post("/v1/chat/completions", chatBody("chat", false), keyed("k-3"))
		if r1.StatusCode != 400 || r2.StatusCode != 400 || !bytes.Equal(b1, b2) || r2.Header.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("error replay: %d %d", r1.StatusCode, r2.StatusCode)
		}
		if n := e.primary.Stats().ByIdempotencyKey; len(n) == 0 {
			t.Fatal("the mock saw no idempotency keys")
		}
		// Invalid keys are refused before anything else.
		r, b := e.post("/v1/chat/completions", chatBody("chat", false), keyed("has space"))
		if r.StatusCode != 400 || !strings.Contains(string(b), api.CodeInvalidKey) {
			t.Fatalf("bad key: %d %s", r.StatusCode, b)
		}
	})
}

func TestKeysAreScopedByTenant(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}}, func(t *testing.T, e *env) {
		res1, _ := e.post("/v1/chat/completions", chatBody("solo", false), keyed("shared"))
		req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("solo", false)))
		req.Header.Set("Authorization", "Bearer "+keyGlobex)
		req.Header.Set("Idempotency-Key", "shared")
		res2, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res2.Body)
		if res2.StatusCode != 200 || res2.Header.Get("X-Oncegate-Dedup") != "miss" ||
			res2.Header.Get("X-Oncegate-Request-Id") == res1.Header.Get("X-Oncegate-Request-Id") || e.primary.Stats().Requests != 2 {
			t.Fatalf("tenant B's key joined tenant A's request: %v", res2.Header)
		}
	})
}

func TestIndeterminateIsNeverReDispatched(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30}}, func(t *testing.T, e *env) {
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 5})))
		res, _ := e.rawStream("chat-stop", keyed("k-ind"))
		if r := e.receipt(res.Header.Get("X-Oncegate-Request-Id")); r.Terminal != "indeterminate" {
			t.Fatalf("terminal %s", r.Terminal)
		}
		res2, body := e.post("/v1/chat/completions", chatBody("chat-stop", true), keyed("k-ind"))
		if res2.StatusCode != 502 || !strings.Contains(string(body), api.CodeOutcomeUnknown) || e.primary.Stats().Requests != 1 {
			t.Fatalf("same key after an indeterminate outcome: %d %s (upstream %d)", res2.StatusCode, body, e.primary.Stats().Requests)
		}
	})
}

func TestExpiredKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		onExpired string
		status    int
		dedup     string
	}{{"reject", 409, ""}, {"new", 200, "miss"}} {
		t.Run(tc.onExpired, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: "idempotency: {retention: 300ms, on_expired: " + tc.onExpired + "}\n"}, func(t *testing.T, e *env) {
				e.post("/v1/chat/completions", chatBody("chat", false), keyed("old"))
				time.Sleep(400 * time.Millisecond)
				res, body := e.post("/v1/chat/completions", chatBody("chat", false), keyed("old"))
				if res.StatusCode != tc.status || (tc.dedup != "" && res.Header.Get("X-Oncegate-Dedup") != tc.dedup) {
					t.Fatalf("%d %s %s", res.StatusCode, res.Header.Get("X-Oncegate-Dedup"), body)
				}
				if tc.status == 409 && (!strings.Contains(string(body), api.CodeKeyExpired) || res.Header.Get("x-should-retry") != "false") {
					t.Fatalf("%s", body)
				}
			})
		})
	}
}

// docs/streaming.md: a joiner leaving never cancels the owner's call; the owner
// leaving does not cancel it while a joiner remains.
func TestOwnerAndJoinerDisconnects(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30, TokenInterval: 15 * time.Millisecond}}, func(t *testing.T, e *env) {
		want := answer(t, provider.OpenAI, prompt, 30)
		ownerCtx, ownerLeaves := context.WithCancel(context.Background())
		go func() {
			req, _ := http.NewRequestWithContext(ownerCtx, "POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", true)))
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			if res, err := e.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		joinerCtx, joinerLeaves := context.WithCancel(context.Background())
		go func() { // a joiner that leaves early
			req, _ := http.NewRequestWithContext(joinerCtx, "POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", true)))
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			if res, err := e.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
			}
		}()
		time.Sleep(50 * time.Millisecond)
		joinerLeaves()
		res, body := e.rawStream("chat", nil) // a joiner that stays
		ownerLeaves()
		if text := sseText(body); res.Header.Get("X-Oncegate-Dedup") != "joined" || text != want {
			t.Fatalf("the staying joiner (%s) read %q", res.Header.Get("X-Oncegate-Dedup"), text)
		}
		if s := e.primary.Stats(); s.Requests != 1 || s.Disconnects != 0 || s.OutputTokens != 30 {
			for id := range s.ByRequestID {
				r := e.receipt(id)
				for _, a := range r.Attempts {
					t.Logf("request %s attempt %d %s %s %s emitted %d err %+v", id, a.Ordinal, a.Purpose, a.Kind, a.Cause, a.EmittedTokens, a.Error)
				}
			}
			t.Fatalf("upstream %+v: a leaving subscriber disturbed the call", s.Counter)
		}
	})
}

func TestJoinThatWouldOutliveTheJoinersDeadline(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5, TTFT: 600 * time.Millisecond}}, func(t *testing.T, e *env) {
		go func() { // the owner, slow upstream; t.Fatal must stay on the test's goroutine
			req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", false)))
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			req.Header.Set("Idempotency-Key", "slow")
			if res, err := e.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		}()
		time.Sleep(100 * time.Millisecond)
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{"Idempotency-Key": "slow", "X-Oncegate-Timeout-Ms": "200"})
		if res.StatusCode != 409 || res.Header.Get("x-should-retry") != "true" || res.Header.Get("Retry-After") == "" || !strings.Contains(string(body), api.CodeKeyInUse) {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
		}
	})
}

// A joiner refused because its own deadline is too short is told to come
// back when the owner may well have finished — about as long again as the
// owner has run — not when the owner's deadline ends: it gets its answer
// soon after the owner finishes, long before that deadline.
func TestARefusedJoinerComesBackWhenTheOwnerMayHaveFinished(t *testing.T) {
	t.Parallel()
	// The owner streams 30 tokens 200 ms apart: about 6 s of its 10 s deadline.
	inBubble(t, envOptions{mock: mock.Config{Tokens: 30, TokenInterval: 200 * time.Millisecond}}, func(t *testing.T, e *env) {
		start := time.Now()
		ownerDone := make(chan time.Time, 1)
		go func() {
			res, body := e.post("/v1/chat/completions", chatBody("chat", true), keyed("long"))
			if res.StatusCode == 200 && strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				ownerDone <- time.Now()
			}
			close(ownerDone)
		}()
		time.Sleep(1500 * time.Millisecond)
		ownerDeadline := start.Add(10 * time.Second)
		joiner := map[string]string{"Idempotency-Key": "long", "X-Oncegate-Timeout-Ms": "500"}
		for {
			res, body := e.post("/v1/chat/completions", chatBody("chat", true), joiner)
			if res.StatusCode == 200 {
				if res.Header.Get("X-Oncegate-Dedup") != "replayed" {
					t.Fatalf("the joiner's answer: %v", res.Header)
				}
				break
			}
			ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
			ran := time.Since(start)
			if res.StatusCode != 409 || err != nil || !strings.Contains(string(body), api.CodeKeyInUse) {
				t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
			}
			// As long again as the owner has run, and never past its deadline.
			if left := time.Until(ownerDeadline); ra < 1 || time.Duration(ra)*time.Second > max(time.Second, ran.Round(time.Second)+time.Second) ||
				time.Duration(ra-1)*time.Second > left {
				t.Fatalf("Retry-After %d s after the owner ran %v, with %v of its deadline left", ra, ran, left)
			}
			time.Sleep(time.Duration(ra) * time.Second)
		}
		finished, ok := <-ownerDone
		if !ok {
			t.Fatal("the owner did not get its answer")
		}
		// The joiner came back within as long again as the owner ran,
		// before the owner's deadline, which it was once told to wait for.
		if back := time.Now(); back.After(ownerDeadline) || back.Sub(start) > 2*finished.Sub(start) {
			t.Fatalf("the joiner had its answer %v after the owner started; the owner finished after %v", back.Sub(start), finished.Sub(start))
		}
		if n := e.primary.Stats().Requests; n != 1 {
			t.Fatalf("%d upstream calls", n)
		}
	})
}

// Raw idempotency keys, gateway API keys and provider keys never reach the
// database file or the logs.
func TestSecretsNeverReachTheDatabaseOrLogs(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}, logs: lockedWriter{&logs, &mu}}, func(t *testing.T, e *env) {
		const rawKey = "idem-SECRET-7f3a9c"
		for i := 0; i < 3; i++ {
			e.post("/v1/chat/completions", chatBody("chat", i == 1), keyed(rawKey))
		}
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 503})))
		e.post("/v1/chat/completions", chatBody("solo", false), keyed(rawKey+"-2"))
		synctest.Wait() // a line is logged once its answer was sent
		_ = e.store.Close()
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(e.storePath()), "ledger.db*"))
		if len(files) == 0 {
			t.Fatal("no database files")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, secret := range []string{rawKey, keyAcme, keyGlobex} {
			for _, f := range files {
				data, _ := os.ReadFile(f)
				if bytes.Contains(data, []byte(secret)) {
					t.Fatalf("%s contains a raw secret", f)
				}
			}
			if bytes.Contains(logs.Bytes(), []byte(secret)) {
				t.Fatal("the logs contain a raw secret")
			}
		}
		if logs.Len() == 0 {
			t.Fatal("nothing was logged: the check proves nothing")
		}
	})
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// sseText concatenates the content deltas of an OpenAI SSE body.
func sseText(body string) string {
	var sb strings.Builder
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 {
			sb.WriteString(c.Choices[0].Delta.Content)
		}
	}
	return sb.String()
}

// fingerprint_replay_window: a keyless twin that finished within the
// window replays instead of running again.
func TestFingerprintReplayWindow(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, yaml: "idempotency: {fingerprint_replay_window: 1m}\n"}, func(t *testing.T, e *env) {
		r1, b1 := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		r2, b2 := e.post("/v1/chat/completions", chatBody("chat", false), nil)
		if r2.Header.Get("X-Oncegate-Dedup") != "replayed" || !bytes.Equal(b1, b2) ||
			r2.Header.Get("X-Oncegate-Request-Id") != r1.Header.Get("X-Oncegate-Request-Id") || e.primary.Stats().Requests != 1 {
			t.Fatalf("keyless twin within the window: %s, upstream %d", r2.Header.Get("X-Oncegate-Dedup"), e.primary.Stats().Requests)
		}
	})
}

// A keyed stream whose client left after output it may have shown keeps
// its key: the same key later is 502 outcome_unknown, never a second
// generation with a second receipt.
func TestAKeyIsNeverReleasedAfterVisibleOutput(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 200, TokenInterval: 20 * time.Millisecond}}, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/chat/completions", strings.NewReader(chatBody("chat", true)))
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("Idempotency-Key", "left-mid-stream")
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		id := res.Header.Get("X-Oncegate-Request-Id")
		buf := make([]byte, 512)
		for got := ""; !strings.Contains(got, `"content":"`) || strings.Contains(got, `"content":""`) && strings.Count(got, `"content":"`) < 2; {
			n, err := res.Body.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += string(buf[:n])
		}
		cancel() // the client leaves after visible output
		_ = res.Body.Close()
		identity := "k:" + identity.KeyDigest("acme", "chat.completions", "left-mid-stream")
		waitWithin(t, 10*time.Second, func() bool {
			r, err := e.store.Get(context.Background(), identity)
			return err == nil && r.State.Finished()
		})
		if r, _ := e.store.Get(context.Background(), identity); r.State != ledger.Indeterminate || r.RequestID != id {
			t.Fatalf("the key's record after the client left: %+v", r)
		}
		again, body := e.post("/v1/chat/completions", chatBody("chat", true), keyed("left-mid-stream"))
		if again.StatusCode != 502 || !strings.Contains(string(body), api.CodeOutcomeUnknown) {
			t.Fatalf("the same key later: %d %s", again.StatusCode, body)
		}
		if n := e.primary.Stats().Requests; n != 1 {
			t.Fatalf("a second generation for one key: the provider saw %d requests", n)
		}
	})
}

// A refusal made before any dispatch protects nothing: it is not pinned
// to the key, and the same key tries again once the refusal's cause is
// gone (here: the breaker closed).
func TestARefusalBeforeAnyDispatchIsNotPinnedToTheKey(t *testing.T) {
	t.Parallel()
	b := &switchable{}
	b.refuse.Store(true)
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4}, breakers: b}, func(t *testing.T, e *env) {
		res, body := e.post("/v1/chat/completions", chatBody("solo", false), keyed("refused-first"))
		if res.StatusCode != 503 || !strings.Contains(string(body), api.CodeCircuitOpen) {
			t.Fatalf("with the breaker open: %d %s", res.StatusCode, body)
		}
		refused := res.Header.Get("X-Oncegate-Request-Id")
		b.refuse.Store(false)
		res, body = e.post("/v1/chat/completions", chatBody("solo", false), keyed("refused-first"))
		if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "miss" || res.Header.Get("X-Oncegate-Request-Id") == refused {
			t.Fatalf("the same key after the breaker closed: %d %s %v", res.StatusCode, body, res.Header)
		}
		if r := e.receipt(refused); r.Terminal != "exhausted" || len(r.Attempts) != 0 || r.Reason != "circuit_open" {
			t.Fatalf("the refusal's receipt: %+v", r)
		}
	})
}

// switchable is a set of breakers that refuse every route while refuse
// is set.
type switchable struct{ refuse atomic.Bool }

func (s *switchable) Allows(string) bool { return !s.refuse.Load() }
func (s *switchable) Acquire(string) (breaker.Ticket, bool) {
	return breaker.Ticket{State: breaker.Closed, Generation: 1}, !s.refuse.Load()
}
func (s *switchable) Done(string, breaker.Ticket, breaker.Outcome) {}

// Identical keyless requests racing for one flight: the one that read the
// clock first may acquire second; it joins, it is never told the request
// (under a key it never sent) is in use for longer than its own deadline.
func TestRacingIdenticalKeylessRequestsAllJoin(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 30 * time.Millisecond}}, func(t *testing.T, e *env) {
		const bursts, width = 50, 100
		var conflicts, other atomic.Int64
		for b := range bursts {
			body := distinctBody("chat", b, "")
			var wg sync.WaitGroup
			for range width {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+keyAcme)
					res, err := e.client.Do(req)
					if err != nil {
						other.Add(1)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					switch res.StatusCode {
					case 200:
					case 409:
						conflicts.Add(1)
					default:
						other.Add(1)
					}
				}()
			}
			wg.Wait()
		}
		if conflicts.Load() != 0 || other.Load() != 0 {
			t.Fatalf("%d of %d identical concurrent requests got 409, %d another failure", conflicts.Load(), bursts*width, other.Load())
		}
	})
}

// A client that wants independent samples says so: identical keyless
// requests with X-Oncegate-Join: off (or, for every request, the
// configuration's keyless_join: false) each get a generation of their own.
func TestKeylessJoinsCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	twins := func(e *env, headers map[string]string) []*http.Response {
		var wg sync.WaitGroup
		out := make([]*http.Response, 2)
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i], _ = e.post("/v1/chat/completions", chatBody("chat", false), headers)
			}()
		}
		wg.Wait()
		return out
	}
	for _, c := range []struct {
		name    string
		yaml    string
		headers map[string]string
	}{
		{"header", "", map[string]string{"X-Oncegate-Join": "off"}},
		{"configuration", "idempotency: {keyless_join: false}\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 200 * time.Millisecond}, yaml: c.yaml}, func(t *testing.T, e *env) {
				res := twins(e, c.headers)
				for _, r := range res {
					if r.StatusCode != 200 || r.Header.Get("X-Oncegate-Dedup") != "miss" {
						t.Fatalf("%d %s", r.StatusCode, r.Header.Get("X-Oncegate-Dedup"))
					}
				}
				if res[0].Header.Get("X-Oncegate-Request-Id") == res[1].Header.Get("X-Oncegate-Request-Id") || e.primary.Stats().Requests != 2 {
					t.Fatalf("two independent samples share a generation: %d upstream requests", e.primary.Stats().Requests)
				}
			})
		})
	}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 200 * time.Millisecond}}, func(t *testing.T, e *env) {
		if res := twins(e, map[string]string{"X-Oncegate-Join": "on"}); res[0].Header.Get("X-Oncegate-Request-Id") != res[1].Header.Get("X-Oncegate-Request-Id") {
			t.Fatal("with joins on, identical requests in flight did not share a generation")
		}
		res, body := e.post("/v1/chat/completions", chatBody("chat", false), map[string]string{"X-Oncegate-Join": "maybe"})
		if res.StatusCode != 400 || !strings.Contains(string(body), "X-Oncegate-Join") {
			t.Fatalf("a bad X-Oncegate-Join: %d %s", res.StatusCode, body)
		}
	})
}
