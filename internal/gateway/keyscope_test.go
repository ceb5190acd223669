package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/mock"
)

// The same Idempotency-Key from two virtual keys of one tenant names two
// logical requests: each key gets its own generation, charged to it, and
// its own replays; neither is told the other used the key. The tenant's
// own keys keep the scope they always had.
func TestVirtualKeysIdempotencyKeysAreTheirOwn(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	a, b := e.issue(`{"tenant":"acme","name":"a"}`), e.issue(`{"tenant":"acme","name":"b"}`)
	type answer struct{ id, dedup, text string }
	send := func(key, idem, text string) answer {
		t.Helper()
		var h http.Header
		cl := e.openai(&h, oopt2.WithAPIKey(key))
		res, err := cl.Chat.Completions.New(ctx, oaParams("chat", text), oopt("Idempotency-Key", idem))
		if err != nil {
			t.Fatalf("Idempotency-Key %s: %v", idem, err)
		}
		return answer{h.Get("X-Oncegate-Request-Id"), h.Get("X-Oncegate-Dedup"), res.Choices[0].Message.Content}
	}
	before := e.primary.Requests()
	ofA, ofB := send(a.Key, "order-1", "the same question"), send(b.Key, "order-1", "the same question")
	if ofA.dedup != "miss" || ofB.dedup != "miss" || ofA.id == ofB.id {
		t.Fatalf("the same Idempotency-Key from two keys: a %+v, b %+v", ofA, ofB)
	}
	if n := e.primary.Requests() - before; n != 2 {
		t.Fatalf("%d upstream calls for two keys' requests, want 2", n)
	}
	for key, want := range map[string]answer{a.Key: ofA, b.Key: ofB} {
		if got := send(key, "order-1", "the same question"); got.dedup != "replayed" || got.id != want.id || got.text != want.text {
			t.Fatalf("a key's own replay: %+v, want %+v", got, want)
		}
	}
	for k, id := range map[string]string{a.ID: ofA.id, b.ID: ofB.id} {
		if rc := e.receipt(id); rc.KeyID != k || rc.Totals.CostUSD <= 0 {
			t.Fatalf("receipt %s: key %q, cost %v; want %q", id, rc.KeyID, rc.Totals.CostUSD, k)
		}
		var v keyView
		if st, body := e.adminDo(keyAdmin, "GET", "/admin/keys/"+k, "", &v); st != 200 || v.Spend == nil || v.Spend.TodayUSD <= 0 {
			t.Fatalf("key %s was charged nothing for its generation: %d %s", k, st, body)
		}
	}
	// A different body under a key another key used is no reuse.
	send(a.Key, "order-2", "a's question")
	if got := send(b.Key, "order-2", "b's question"); got.dedup != "miss" {
		t.Fatalf("b's own first use of a key a used: %+v", got)
	}
	// A turn too.
	turn := func(key string) *responses.Response {
		t.Helper()
		cl := e.openai(nil, oopt2.WithAPIKey(key))
		res, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "chat",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("one turn")}}, oopt("Idempotency-Key", "turn-1"), oopt2.WithMaxRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	before = e.primary.Requests()
	if ta, tb := turn(a.Key), turn(b.Key); ta.ID == tb.ID || e.primary.Requests()-before != 2 {
		t.Fatalf("two keys' turns under one Idempotency-Key: %s and %s, %d upstream calls", ta.ID, tb.ID, e.primary.Requests()-before)
	} else if again := turn(a.Key); again.ID != ta.ID || e.primary.Requests()-before != 2 {
		t.Fatalf("a's own retry of its turn: %s, want %s", again.ID, ta.ID)
	}

	// The tenant's key: a scope of its own, the tenant's, as before —
	// its records are where they always were, and replay.
	before = e.primary.Requests()
	file := send(keyAcme, "order-1", "the same question")
	if again := send(keyAcme, "order-1", "the same question"); file.dedup != "miss" || again.dedup != "replayed" || again.id != file.id {
		t.Fatalf("the tenant's key: %+v then %+v", file, again)
	}
	if n := e.primary.Requests() - before; n != 1 {
		t.Fatalf("the tenant's key and its replay: %d upstream calls", n)
	}
	rec, err := e.store.Get(ctx, "k:"+identity.KeyDigest("acme", "chat.completions", "order-1"))
	if err != nil || rec.RequestID != file.id {
		t.Fatalf("the tenant key's record under its digest: %+v %v", rec, err)
	}
}

// Identical keyless requests from two virtual keys of one tenant, the
// second arriving while the first is in flight, are two generations; from
// one key they are one. An official SDK's retry from another key does
// not get a key's stored answer either.
func TestVirtualKeysKeylessRequestsDoNotJoin(t *testing.T) {
	inBubble(t, envOptions{mock: mock.Config{Tokens: 4, TTFT: 200 * time.Millisecond}}, func(t *testing.T, e *env) {
		a, b := e.issue(`{"tenant":"acme","name":"a"}`), e.issue(`{"tenant":"acme","name":"b"}`)
		body := chatBody("chat", false)
		pair := func(first, second string) (*http.Response, *http.Response) {
			t.Helper()
			before := e.primary.Requests()
			var wg sync.WaitGroup
			var r1 *http.Response
			wg.Go(func() { r1, _ = e.postKey(first, "/v1/chat/completions", body, nil) })
			synctest.Wait() // the first is at the provider, waiting for its first byte
			if n := e.primary.Requests() - before; n != 1 {
				t.Fatalf("the first request is not in flight (%d upstream calls)", n)
			}
			r2, _ := e.postKey(second, "/v1/chat/completions", body, nil)
			wg.Wait()
			return r1, r2
		}
		before := e.primary.Requests()
		r1, r2 := pair(a.Key, a.Key)
		if r2.Header.Get("X-Oncegate-Dedup") != "joined" || r1.Header.Get("X-Oncegate-Request-Id") != r2.Header.Get("X-Oncegate-Request-Id") ||
			e.primary.Requests()-before != 1 {
			t.Fatalf("one key's identical requests in flight did not join: %v", r2.Header)
		}
		before = e.primary.Requests()
		r1, r2 = pair(a.Key, b.Key)
		if r1.StatusCode != 200 || r2.StatusCode != 200 || r2.Header.Get("X-Oncegate-Dedup") != "miss" ||
			r1.Header.Get("X-Oncegate-Request-Id") == r2.Header.Get("X-Oncegate-Request-Id") || e.primary.Requests()-before != 2 {
			t.Fatalf("another key's identical request joined: %d upstream calls, %v", e.primary.Requests()-before, r2.Header)
		}
		// An SDK's retry replays what its own key asked within the SDK
		// retry window, never another key's answer.
		before = e.primary.Requests()
		retry := map[string]string{"X-Stainless-Retry-Count": "1"}
		if res, _ := e.postKey(a.Key, "/v1/chat/completions", body, retry); res.Header.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("a's own SDK retry: %v", res.Header)
		}
		other := e.issue(`{"tenant":"acme","name":"c"}`)
		if res, _ := e.postKey(other.Key, "/v1/chat/completions", body, retry); res.Header.Get("X-Oncegate-Dedup") != "miss" || e.primary.Requests()-before != 1 {
			t.Fatalf("another key's SDK retry got a's answer: %v", res.Header)
		}
		// A turn, too.
		turnBody := `{"model":"chat","input":"one turn"}`
		before = e.primary.Requests()
		var wg sync.WaitGroup
		var t1 *http.Response
		wg.Go(func() { t1, _ = e.postKey(a.Key, "/v1/responses", turnBody, nil) })
		synctest.Wait()
		t2, _ := e.postKey(b.Key, "/v1/responses", turnBody, nil)
		wg.Wait()
		if t1.StatusCode != 200 || t2.StatusCode != 200 || t2.Header.Get("X-Oncegate-Dedup") == "joined" || e.primary.Requests()-before != 2 {
			t.Fatalf("another key's identical turn joined: %d upstream calls, %v", e.primary.Requests()-before, t2.Header)
		}
	})
}
