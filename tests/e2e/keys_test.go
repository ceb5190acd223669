package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate/internal/mock"
)

// adminCall sends an admin API request to a replica with the admin key.
func adminCall(t *testing.T, g *gateway, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, g.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// issueOn issues a virtual key on a replica: its id and secret.
func issueOn(t *testing.T, g *gateway, body string) (id, secret string) {
	t.Helper()
	st, b := adminCall(t, g, "POST", "/admin/keys", body)
	var v struct{ ID, Key string }
	if err := json.Unmarshal(b, &v); err != nil || st != 201 {
		t.Fatalf("issue: %d %s", st, b)
	}
	return v.ID, v.Key
}

// chatAs sends one chat completion with an official SDK at its defaults.
func chatAs(g *gateway, key, text string, opts ...oaopt.RequestOption) (http.Header, error) {
	var hdr http.Header
	opts = append([]oaopt.RequestOption{oaopt.WithBaseURL(g.url + "/v1"), oaopt.WithAPIKey(key),
		oaopt.WithMiddleware(func(r *http.Request, next oaopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil {
				hdr = res.Header.Clone()
			}
			return res, err
		})}, opts...)
	cl := openai.NewClient(opts...)
	_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}, MaxTokens: openai.Int(100)})
	return hdr, err
}

func statusOf(err error) (int, string) {
	var ae *openai.Error
	if errors.As(err, &ae) {
		return ae.StatusCode, ae.Code
	}
	if err == nil {
		return 200, ""
	}
	return -1, err.Error()
}

// Two replicas sharing PostgreSQL and Redis: a key issued on one works on
// the other at once, its rate is one for both, and revoked on one it is
// refused on the other within a second.
func TestVirtualKeyAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	a, b := f.gws[0], f.gws[1]
	id, secret := issueOn(t, a, `{"tenant":"e2e","name":"app","models":["chat"],"budget":{"requests_per_minute":2}}`)
	hdr, err := chatAs(b, secret, "issued on a, used on b")
	if err != nil {
		t.Fatalf("the key issued on one replica, on the other: %v", err)
	}
	req, _ := http.NewRequest("GET", a.url+"/v1/receipts/"+hdr.Get("X-Oncegate-Request-Id"), nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rc struct {
		KeyID string `json:"key_id"`
	}
	_ = json.NewDecoder(res.Body).Decode(&rc)
	res.Body.Close()
	if rc.KeyID != id {
		t.Fatalf("receipt key_id %q, want %q", rc.KeyID, id)
	}
	if _, err := chatAs(a, secret, "second of the minute"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*gateway{a, b} {
		_, err := chatAs(g, secret, "third of the minute", oaopt.WithMaxRetries(0))
		if st, code := statusOf(err); st != 429 || code != "key_rate_limited" {
			t.Fatalf("the third request of a 2-per-minute key: %d %s", st, code)
		}
	}
	if n := f.primary.Stats().Requests; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2", n)
	}
	if st, body := adminCall(t, b, "DELETE", "/admin/keys/"+id, ""); st != 204 {
		t.Fatalf("revoke: %d %s", st, body)
	}
	within(t, time.Second, "the revoked key refused on the other replica", func() bool {
		_, err := chatAs(a, secret, "after the revocation", oaopt.WithMaxRetries(0))
		st, _ := statusOf(err)
		return st == 401
	})
	if n := f.primary.Stats().Requests; n != 2 {
		t.Fatalf("the provider saw %d requests, want 2", n)
	}
	// oncegate spend prints what GET /admin/spend answers.
	for _, format := range []string{"csv", "json"} {
		cmd := exec.Command(binary, "spend", "--config", f.config, "--url", b.url, "--group-by", "key", "--format", format)
		cmd.Env = append(os.Environ(), "ONCEGATE_E2E_KEY="+apiKey, "ONCEGATE_E2E_CAPPED="+keyCapped, "ONCEGATE_E2E_THRIFTY="+keyThrifty, "ONCEGATE_E2E_ADMIN="+adminKey)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("oncegate spend: %v", err)
		}
		st, want := adminCall(t, a, "GET", "/admin/spend?group_by=key&format="+format, "")
		if format == "json" { // the same rows; the default end of the range is each call's now
			var x, y struct{ Data json.RawMessage }
			_, _ = json.Unmarshal(out, &x), json.Unmarshal(want, &y)
			out, want = x.Data, y.Data
		}
		t.Logf("oncegate spend --format %s:\n%s", format, out)
		if st != 200 || !bytes.Equal(out, want) || !bytes.Contains(out, []byte(id)) {
			t.Fatalf("oncegate spend --format %s printed\n%s\nthe API answered\n%s", format, out, want)
		}
	}
}

// A key's day and month are the store's as much as Redis's: a Redis that
// lost everything, and a new replica, still refuse a spent key.
func TestVirtualKeySpendSurvivesRedisFlushAndRestart(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	var secrets []string
	for _, budget := range []string{`{"cost_usd_per_day":0.0005}`, `{"cost_usd_per_month":0.0005}`} {
		_, secret := issueOn(t, f.gws[0], `{"tenant":"e2e","budget":`+budget+`}`)
		secrets = append(secrets, secret)
		var err error
		for i := range 50 {
			if _, err = chatAs(f.gws[i%2], secret, "spend"); err != nil {
				break
			}
		}
		if st, code := statusOf(err); st != 429 || code != "key_budget_exceeded" {
			t.Fatalf("a spent key (%s): %d %s", budget, st, code)
		}
	}
	sent := f.primary.Stats().Requests
	flushPrefix(t, f.coord)
	f.gws = append(f.gws, f.start())
	for _, g := range f.gws {
		for _, secret := range secrets {
			_, err := chatAs(g, secret, "after the flush")
			if st, code := statusOf(err); st != 429 || code != "key_budget_exceeded" {
				t.Fatalf("after Redis lost everything, on %s: %d %s", g.url, st, code)
			}
		}
	}
	if n := f.primary.Stats().Requests; n != sent {
		t.Fatalf("the provider saw %d more requests after the key was spent", n-sent)
	}
}

// A key's max_concurrent holds across replicas: a request held at the
// provider on one replica takes the key's only place, and the other
// replica refuses the next before anything is sent; once the held request
// ends, the place is free on every replica. A key whose day is held only
// by a request in flight is told to come back soon, not at midnight.
func TestVirtualKeyConcurrencyAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	a, b := f.gws[0], f.gws[1]
	_, busy := issueOn(t, a, `{"tenant":"e2e","budget":{"max_concurrent":1}}`)
	// One request's worst case (~10 + 100 tokens at $1/$2 per Mtok) is
	// ~$0.00021: a second does not fit while the first is in flight.
	_, thrifty := issueOn(t, a, `{"tenant":"e2e","budget":{"cost_usd_per_day":0.0003}}`)
	f.primary.SetScript(mock.Script{Rules: []mock.Rule{{FirstCalls: 2, Fault: mock.Fault{Type: mock.FaultHang}}}})
	held := make(chan error, 2)
	for i, key := range []string{busy, thrifty} {
		go func() {
			_, err := chatAs(a, key, "held at the provider "+strconv.Itoa(i), oaopt.WithMaxRetries(0))
			held <- err
		}()
	}
	within(t, 10*time.Second, "both requests held at the provider", func() bool { return f.primary.Requests() == 2 })

	hdr, err := chatAs(b, busy, "a second request in progress", oaopt.WithMaxRetries(0))
	if st, code := statusOf(err); st != 429 || code != "key_concurrency_limited" || hdr.Get("Retry-After") == "" {
		t.Fatalf("a second request of a max_concurrent 1 key, on the other replica: %d %s (Retry-After %q)", st, code, hdr.Get("Retry-After"))
	}
	hdr, err = chatAs(b, thrifty, "its day held by the first", oaopt.WithMaxRetries(0))
	st, code := statusOf(err)
	ra, _ := strconv.Atoi(hdr.Get("Retry-After"))
	if st != 429 || code != "key_budget_exceeded" || ra < 1 || ra > 60 || hdr.Get("x-should-retry") != "true" {
		t.Fatalf("a key whose day a request in flight holds: %d %s (Retry-After %q, x-should-retry %q)", st, code, hdr.Get("Retry-After"), hdr.Get("x-should-retry"))
	}
	if n := f.primary.Requests(); n != 2 {
		t.Fatalf("the provider saw %d requests, want the 2 held", n)
	}

	f.primary.Close() // the held requests are answered (badly), retried and end
	for range 2 {
		<-held
	}
	if _, err := chatAs(b, busy, "after the held one ended", oaopt.WithMaxRetries(0)); err != nil {
		t.Fatalf("the key's place after its request ended: %v", err)
	}
}

// Two virtual keys of one tenant on two replicas sharing PostgreSQL and
// Redis: the same question from each, one held in flight on one replica,
// is two generations, and the same Idempotency-Key from each is two
// requests. Replicas join and replay by identity, and each key's
// identities are its own; a key's own retry on the other replica still
// replays its answer.
func TestVirtualKeysStayApartAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{}, "")
	a, b := f.gws[0], f.gws[1]
	_, ka := issueOn(t, a, `{"tenant":"e2e","name":"a"}`)
	_, kb := issueOn(t, a, `{"tenant":"e2e","name":"b"}`)
	f.primary.SetScript(mock.Script{Rules: []mock.Rule{{FirstCalls: 1, Fault: mock.Fault{Type: mock.FaultHang}}}})
	body := chatJSON("chat", "the same question", false, "")
	ctx, leave := context.WithCancel(context.Background())
	held := make(chan call, 1)
	go func() { held <- send(ctx, a, ka, "", false, body) }()
	within(t, 10*time.Second, "a's request held at the provider", func() bool { return f.primary.Requests() == 1 })
	// Joined, b's request would wait with a's at the provider.
	bctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c := send(bctx, b, kb, "", false, body); c.status != 200 || c.header.Get("X-Oncegate-Dedup") != "miss" {
		t.Fatalf("b's identical request while a's is in flight on the other replica: %v", c)
	}
	if n := f.primary.Requests(); n != 2 {
		t.Fatalf("the provider saw %d requests, want a's (held) and b's", n)
	}
	leave()
	<-held

	before := f.primary.Requests()
	body = chatJSON("chat", "order one", false, "")
	first := send(bctx, a, ka, "order-1", false, body)
	other := send(bctx, b, kb, "order-1", false, body)
	again := send(bctx, b, ka, "order-1", false, body)
	if first.status != 200 || other.status != 200 || other.header.Get("X-Oncegate-Dedup") != "miss" ||
		other.header.Get("X-Oncegate-Request-Id") == first.header.Get("X-Oncegate-Request-Id") {
		t.Fatalf("the same Idempotency-Key from two keys: %v, then %v", first, other)
	}
	if again.header.Get("X-Oncegate-Dedup") != "replayed" || again.header.Get("X-Oncegate-Request-Id") != first.header.Get("X-Oncegate-Request-Id") {
		t.Fatalf("a's own retry on the other replica: %v", again)
	}
	if n := f.primary.Requests() - before; n != 2 {
		t.Fatalf("the provider saw %d requests for two keys' orders, want 2", n)
	}
}
