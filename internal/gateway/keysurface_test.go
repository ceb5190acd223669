package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/mock"
)

// respond sends one turn on POST /v1/responses with an official SDK, as
// key, without the SDK's own retries.
func (e *env) respond(key, model, text string, maxOutput int64) (*responses.Response, error) {
	p := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
	if maxOutput > 0 {
		p.MaxOutputTokens = openai.Int(maxOutput)
	}
	cl := e.openai(nil, oopt2.WithAPIKey(key))
	return cl.Responses.New(context.Background(), p, oopt2.WithMaxRetries(0))
}

// holdKey counts one request of key secret in progress, as a request
// held at the provider would, until the returned func is called.
func (e *env) holdKey(secret string) func() {
	e.t.Helper()
	lk, err := e.gw.keys.Lookup(context.Background(), secret)
	if err != nil || lk == nil {
		e.t.Fatalf("the key: %v", err)
	}
	release, apiErr := e.gw.keys.Enter(lk)
	if apiErr != nil {
		e.t.Fatal(apiErr.Message)
	}
	return release
}

// A virtual key's own limits hold on POST /v1/responses as on chat: its
// models, rate, concurrency, tokens and cost, each refused before the
// provider is asked.
func TestVirtualKeyLimitsOnResponses(t *testing.T) {
	e := newEnv(t, mock.Config{})
	refused := func(t *testing.T, err error, status int, code string) {
		t.Helper()
		st, c, h := apiErrorOf(t, err)
		if st != status || c != code || (status == 429 && h.Get("Retry-After") == "") {
			t.Fatalf("got %d %s (Retry-After %q), want %d %s", st, c, h.Get("Retry-After"), status, code)
		}
	}
	t.Run("models", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","models":["chat-stop"]}`)
		before := e.primary.Requests()
		_, err := e.respond(v.Key, "chat", "not my model", 0)
		refused(t, err, 403, api.CodeModelNotAllowed)
		if _, err := e.respond(v.Key, "chat-stop", "my model", 0); err != nil {
			t.Fatal(err)
		}
		if n := e.primary.Requests() - before; n != 1 {
			t.Fatalf("the provider saw %d requests, want 1", n)
		}
	})
	t.Run("requests per minute", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"requests_per_minute":2}}`)
		before := e.primary.Requests()
		for i := range 2 {
			if _, err := e.respond(v.Key, "chat", "rate "+strconv.Itoa(i), 0); err != nil {
				t.Fatal(err)
			}
		}
		_, err := e.respond(v.Key, "chat", "rate 2", 0)
		refused(t, err, 429, api.CodeKeyRateLimited)
		if n := e.primary.Requests() - before; n != 2 {
			t.Fatalf("the provider saw %d requests, want 2", n)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"max_concurrent":1}}`)
		release := e.holdKey(v.Key)
		before := e.primary.Requests()
		_, err := e.respond(v.Key, "chat", "busy", 0)
		refused(t, err, 429, api.CodeKeyConcurrency)
		if n := e.primary.Requests() - before; n != 0 {
			t.Fatalf("the provider saw %d requests, want 0", n)
		}
		release()
		if _, err := e.respond(v.Key, "chat", "free again", 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("tokens per minute", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"tokens_per_minute":100}}`)
		before := e.primary.Requests()
		var err error
		for i := range 4 { // ~60 tokens each at worst
			if _, err = e.respond(v.Key, "chat", "tokens "+strconv.Itoa(i), 50); err != nil {
				break
			}
		}
		refused(t, err, 429, api.CodeKeyRateLimited)
		if n := e.primary.Requests() - before; n > 2 {
			t.Fatalf("the provider saw %d requests of a 100-token minute at ~60 tokens each", n)
		}
	})
	t.Run("cost per day", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"cost_usd_per_day":0.0005}}`)
		var err error
		var before int64
		for i := range 50 {
			before = e.primary.Requests()
			if _, err = e.respond(v.Key, "chat", "cost "+strconv.Itoa(i), 100); err != nil {
				break
			}
		}
		st, code, h := apiErrorOf(t, err)
		if st != 429 || code != api.CodeKeyBudget || h.Get("x-should-retry") != "false" {
			t.Fatalf("over the day: %d %s %v", st, code, h)
		}
		if n := e.primary.Requests() - before; n != 0 {
			t.Fatalf("the refused turn reached the provider (%d requests)", n)
		}
		var got admin.KeyView
		e.adminDo(keyAdmin, "GET", "/admin/keys/"+v.ID, "", &got)
		if got.Spend == nil || got.Spend.TodayUSD <= 0 || got.Spend.TodayUSD > 0.0005 {
			t.Fatalf("the key's spend today: %+v", got.Spend)
		}
	})
}

// A token count asks a provider but costs nothing: a virtual key's
// models, rate and concurrency hold on it, its cost limits do not.
func TestVirtualKeyLimitsOnCountTokens(t *testing.T) {
	e := newEnv(t, mock.Config{})
	t.Run("models", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","models":["chat"]}`)
		before := e.anthropic.Lookups()
		if res, _, code := e.countTokens(v.Key); res.StatusCode != 403 || code != api.CodeModelNotAllowed {
			t.Fatalf("a count of a model outside the key's list: %d %s", res.StatusCode, code)
		}
		if n := e.anthropic.Lookups() - before; n != 0 {
			t.Fatalf("the provider was asked %d times", n)
		}
	})
	t.Run("requests per minute", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"requests_per_minute":2}}`)
		before := e.anthropic.Lookups()
		for range 2 {
			if res, source, _ := e.countTokens(v.Key); res.StatusCode != 200 || source != "provider" {
				t.Fatalf("a count within the rate: %d %s", res.StatusCode, source)
			}
		}
		res, _, code := e.countTokens(v.Key)
		if res.StatusCode != 429 || code != api.CodeKeyRateLimited || res.Header.Get("Retry-After") == "" {
			t.Fatalf("a count over the key's rate: %d %s", res.StatusCode, code)
		}
		if n := e.anthropic.Lookups() - before; n != 2 {
			t.Fatalf("the provider was asked %d times, want 2", n)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		v := e.issue(`{"tenant":"acme","budget":{"max_concurrent":1}}`)
		release := e.holdKey(v.Key)
		before := e.anthropic.Lookups()
		res, _, code := e.countTokens(v.Key)
		if res.StatusCode != 429 || code != api.CodeKeyConcurrency || res.Header.Get("Retry-After") == "" {
			t.Fatalf("a count while the key is busy: %d %s", res.StatusCode, code)
		}
		if n := e.anthropic.Lookups() - before; n != 0 {
			t.Fatalf("the provider was asked %d times", n)
		}
		release()
	})
	t.Run("cost is not held", func(t *testing.T) {
		// Less than any attempt's worst case: every generation refused.
		v := e.issue(`{"tenant":"acme","budget":{"cost_usd_per_day":0.000001}}`)
		_, err := clientNew(e.openai(nil, oopt2.WithAPIKey(v.Key)), context.Background(), oaParams("chat", "too dear"))
		if st, code, _ := apiErrorOf(t, err); st != 429 || code != api.CodeKeyBudget {
			t.Fatalf("a generation: %d %s", st, code)
		}
		if res, source, _ := e.countTokens(v.Key); res.StatusCode != 200 || source != "provider" {
			t.Fatalf("a count: %d %s", res.StatusCode, source)
		}
	})
}

// A key refused only because requests in flight hold the rest of its day
// is told to come back soon, not at midnight: key_budget_exceeded with a
// short Retry-After and x-should-retry: true. Once its charges leave no
// room, the answer is the day's.
func TestVirtualKeyBudgetHeldByRequestsInFlight(t *testing.T) {
	e := newEnv(t, mock.Config{})
	ctx := context.Background()
	v := e.issue(`{"tenant":"acme","budget":{"cost_usd_per_day":0.0005}}`)
	cl := e.openai(nil, oopt2.WithAPIKey(v.Key))
	p := oaParams("chat", "held")
	p.MaxTokens = openai.Int(100) // a worst case of ~$0.00022
	if _, err := e.gw.keys.Lookup(ctx, v.Key); err != nil {
		t.Fatal(err)
	}
	// Requests in flight hold $0.0004 of the day; nothing is charged.
	held, ok := e.gw.keys.Limits.Day.Reserve(v.ID, gw.NanoFromUSD(0.0004), time.Now().Add(time.Minute))
	if !ok {
		t.Fatal("the reservation was refused")
	}
	before := e.primary.Requests()
	_, err := cl.Chat.Completions.New(ctx, p, oopt2.WithMaxRetries(0))
	st, code, h := apiErrorOf(t, err)
	ra, _ := strconv.Atoi(h.Get("Retry-After"))
	if st != 429 || code != api.CodeKeyBudget || ra < 1 || ra > 60 || h.Get("x-should-retry") != "true" {
		t.Fatalf("while requests in flight hold the day: %d %s Retry-After %q x-should-retry %q", st, code, h.Get("Retry-After"), h.Get("x-should-retry"))
	}
	if n := e.primary.Requests() - before; n != 0 {
		t.Fatalf("the provider saw %d requests", n)
	}
	e.gw.keys.Limits.Day.Settle(held, 0) // they finish, costing nothing
	var last error
	for i := range 50 {
		q := p
		q.Messages = userMsg("spend " + strconv.Itoa(i))
		if _, last = cl.Chat.Completions.New(ctx, q, oopt2.WithMaxRetries(0)); last != nil {
			break
		}
	}
	st, code, h = apiErrorOf(t, last)
	ra, _ = strconv.Atoi(h.Get("Retry-After"))
	now := time.Now().UTC()
	untilMidnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now)
	if st != 429 || code != api.CodeKeyBudget || h.Get("x-should-retry") != "false" || time.Duration(ra)*time.Second < untilMidnight-time.Minute {
		t.Fatalf("a spent day: %d %s Retry-After %q x-should-retry %q", st, code, h.Get("Retry-After"), h.Get("x-should-retry"))
	}
}
