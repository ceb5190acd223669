package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/mock"
)

// notFound fails unless err is the 404 code an id that does not exist
// gets, with the same message but for the id.
func notFound(t *testing.T, err error, code, id string, nobody error) {
	t.Helper()
	var got, want *openai.Error
	if !errors.As(err, &got) || !errors.As(nobody, &want) {
		t.Fatalf("want API errors, got %v and %v", err, nobody)
	}
	if got.StatusCode != 404 || got.Code != code || want.StatusCode != 404 || want.Code != code ||
		strings.ReplaceAll(got.Message, id, "ID") != strings.ReplaceAll(want.Message, "resp_nobody", "ID") {
		t.Fatalf("another key's %s: %d %s %q; an id that does not exist: %d %s %q", id, got.StatusCode, got.Code, got.Message,
			want.StatusCode, want.Code, want.Message)
	}
}

// A virtual key reads, continues and deletes only the stored responses
// it made: another key of the same tenant is told they do not exist, and
// nothing reaches a provider. The tenant's own key reads them all.
func TestVirtualKeysReadOnlyTheirOwnResponses(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	a, b := e.issue(`{"tenant":"acme","name":"a"}`), e.issue(`{"tenant":"acme","name":"b"}`)
	ca, cb, file := e.openai(nil, oopt2.WithAPIKey(a.Key)), e.openai(nil, oopt2.WithAPIKey(b.Key)), e.openai(nil)
	first, err := e.respond(a.Key, "chat", "what is a logical request?", 0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ca.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and a physical attempt?")}}, oopt2.WithMaxRetries(0))
	if err != nil {
		t.Fatalf("the key that made a response continues it: %v", err)
	}
	_, nobody := cb.Responses.Get(ctx, "resp_nobody", responses.ResponseGetParams{}, oopt2.WithMaxRetries(0))
	calls := e.primary.Requests()

	_, err = cb.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}, oopt2.WithMaxRetries(0))
	notFound(t, err, api.CodeResponseNotFound, first.ID, nobody)
	_, err = cb.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{}, oopt2.WithMaxRetries(0))
	notFound(t, err, api.CodeResponseNotFound, second.ID, nobody)
	err = cb.Responses.Delete(ctx, second.ID, oopt2.WithMaxRetries(0))
	notFound(t, err, api.CodeResponseNotFound, second.ID, nobody)
	_, err = cb.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(second.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me what you told a")}}, oopt2.WithMaxRetries(0))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != api.CodeResponseNotFound || ae.Param != "previous_response_id" {
		t.Fatalf("another key continues a response: %v", err)
	}
	if n := e.primary.Requests() - calls; n != 0 {
		t.Fatalf("another key's reads of a response reached the provider %d times", n)
	}

	// The key that made them, and the tenant's own key, still read them:
	// nothing was deleted.
	for name, cl := range map[string]openai.Client{"the key that made it": ca, "the tenant's key": file} {
		got, err := cl.Responses.Get(ctx, second.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != second.OutputText() || got.PreviousResponseID != first.ID {
			t.Fatalf("%s reads the response: %v", name, err)
		}
		items, err := cl.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{})
		if err != nil || len(items.Data) != 1 {
			t.Fatalf("%s reads its input items: %v", name, err)
		}
	}
	// The tenant's key continues a virtual key's conversation; a third
	// turn of a's own goes on from its own.
	if _, err := file.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(second.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("the tenant asks")}}, oopt2.WithMaxRetries(0)); err != nil {
		t.Fatalf("the tenant's key continues a key's response: %v", err)
	}
	if err := ca.Responses.Delete(ctx, second.ID); err != nil {
		t.Fatalf("the key that made a response deletes it: %v", err)
	}
}

// A virtual key's receipts are its own: another key of the tenant lists
// none of them and reads none of them, in the receipts API as in the
// console; the tenant's own key and the admin key read them all.
func TestVirtualKeysReadOnlyTheirOwnReceipts(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	a, b := e.issue(`{"tenant":"acme","name":"a"}`), e.issue(`{"tenant":"acme","name":"b"}`)
	send := func(key, text string) string {
		t.Helper()
		var h http.Header
		if _, err := clientNew(e.openai(&h, oopt2.WithAPIKey(key)), ctx, oaParams("chat", text)); err != nil {
			t.Fatal(err)
		}
		return h.Get("X-Oncegate-Request-Id")
	}
	ofB := send(b.Key, "b asks")
	// a's are newer than b's: a listing of b's newest reads past them.
	ofA := []string{send(a.Key, "a asks"), send(a.Key, "a asks again")}
	ofFile := send(keyAcme, "the tenant asks")

	type list struct {
		Data []struct {
			RequestID string `json:"request_id"`
		} `json:"data"`
	}
	ids := func(key, path string) []string {
		t.Helper()
		var l list
		if st, body := e.adminDo(key, "GET", path, "", &l); st != 200 {
			t.Fatalf("%s: %d %s", path, st, body)
		}
		var out []string
		for _, rc := range l.Data {
			out = append(out, rc.RequestID)
		}
		return out
	}
	if got := ids(b.Key, "/v1/receipts?limit=100"); !slices.Equal(got, []string{ofB}) {
		t.Fatalf("b lists %v, want only its own %s", got, ofB)
	}
	if got := ids(b.Key, "/v1/receipts?limit=1"); !slices.Equal(got, []string{ofB}) {
		t.Fatalf("b's newest receipt: %v, want %s", got, ofB)
	}
	if got := ids(a.Key, "/v1/receipts?limit=100"); !slices.Equal(got, []string{ofA[1], ofA[0]}) {
		t.Fatalf("a lists %v, want its own %v", got, ofA)
	}
	for _, key := range []string{keyAcme, keyAdmin} {
		if got := ids(key, "/v1/receipts?limit=100&tenant=acme"); len(got) != 4 || !slices.Contains(got, ofB) || !slices.Contains(got, ofA[0]) || !slices.Contains(got, ofFile) {
			t.Fatalf("%s lists %v, want every receipt of the tenant", key, got)
		}
	}
	const none = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	for _, path := range []string{"/v1/receipts/ID", "/v1/console/requests/ID", "/v1/console/requests/ID/verify"} {
		p := strings.Replace(path, "ID", ofA[0], 1)
		st, body := e.adminDo(b.Key, "GET", p, "", nil)
		nst, nbody := e.adminDo(b.Key, "GET", strings.Replace(path, "ID", none, 1), "", nil)
		if st != 404 || nst != 404 || strings.ReplaceAll(string(body), ofA[0], "ID") != strings.ReplaceAll(string(nbody), none, "ID") {
			t.Fatalf("b reads a's %s: %d %s; an id that does not exist: %d %s", p, st, body, nst, nbody)
		}
		for _, key := range []string{a.Key, keyAcme, keyAdmin} {
			if st, body := e.adminDo(key, "GET", p, "", nil); st != 200 {
				t.Fatalf("%s reads a's %s: %d %s", key, p, st, body)
			}
		}
	}
	if got := ids(b.Key, "/v1/console/requests"); !slices.Equal(got, []string{ofB}) {
		t.Fatalf("b's console lists %v, want only its own %s", got, ofB)
	}
	if got := ids(keyAcme, "/v1/console/requests"); len(got) != 4 {
		t.Fatalf("the tenant's console lists %v", got)
	}
}

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
		var v admin.KeyView
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
