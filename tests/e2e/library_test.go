package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"

	"github.com/oncegate/oncegate"
	"github.com/oncegate/oncegate/internal/mock"
)

// gate holds every request in front of a mock until let through; it
// can be closed again for the next round.
type gate struct {
	next     http.Handler
	mu       sync.Mutex
	open     chan struct{}
	arrivals chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	open := g.open // the gate as it was when the request came
	g.mu.Unlock()
	g.arrivals <- struct{}{}
	select {
	case <-open:
	case <-r.Context().Done():
		return
	}
	g.next.ServeHTTP(w, r)
}

// letThrough opens the gate for what waits, and closes it again behind.
func (g *gate) letThrough() {
	g.mu.Lock()
	close(g.open)
	g.open = make(chan struct{})
	g.mu.Unlock()
}

// A Go program's embedded gateway and a `serve` process are replicas of
// one fleet (PostgreSQL and Redis): a request with an Idempotency-Key
// sent to one while the provider works on it is joined by the same
// request sent to the other — one upstream call, one answer for both —
// in both directions.
func TestAnEmbeddedGatewayAndServeJoinEachOther(t *testing.T) {
	g := &gate{open: make(chan struct{}), arrivals: make(chan struct{}, 16)}
	f := newFleetWith(t, 1, mock.Config{Tokens: 6}, "", func(f *fleet) {
		f.front = func(next http.Handler) http.Handler { g.next = next; return g }
	})
	emb, err := oncegate.Open(context.Background(), oncegate.Options{ConfigFile: f.config, Store: f.store, Coordination: f.coord,
		Env: map[string]string{"ONCEGATE_E2E_KEY": apiKey, "ONCEGATE_E2E_CAPPED": keyCapped, "ONCEGATE_E2E_THRIFTY": keyThrifty, "ONCEGATE_E2E_ADMIN": adminKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	served := f.gws[0]
	viaServe := func(key string) (string, string, error) {
		hdr, err := chatAs(served, apiKey, "one question, two doors", oaopt.WithHeader("Idempotency-Key", key))
		return hdr.Get("X-Oncegate-Request-Id"), hdr.Get("X-Oncegate-Dedup"), err
	}
	viaLibrary := func(key string) (string, string, error) {
		var hdr http.Header
		c := openai.NewClient(oaopt.WithBaseURL("http://oncegate/v1/"), oaopt.WithHTTPClient(emb.HTTPClient(apiKey)), oaopt.WithMaxRetries(0),
			oaopt.WithHeader("Idempotency-Key", key), oaopt.WithMiddleware(func(r *http.Request, next oaopt.MiddlewareNext) (*http.Response, error) {
				res, err := next(r)
				if res != nil {
					hdr = res.Header.Clone()
				}
				return res, err
			}))
		_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one question, two doors")}, MaxTokens: openai.Int(100)})
		return hdr.Get("X-Oncegate-Request-Id"), hdr.Get("X-Oncegate-Dedup"), err
	}
	type answer struct{ id, dedup string }
	for i, c := range []struct {
		name         string
		first, other func(string) (string, string, error)
	}{
		{"serve first, the library joins", viaServe, viaLibrary},
		{"the library first, serve joins", viaLibrary, viaServe},
	} {
		before := f.primary.Stats().Requests
		answers := make(chan answer, 2)
		send := func(do func(string) (string, string, error)) {
			id, dedup, err := do(fmt.Sprintf("two-doors-%d", i))
			if err != nil {
				var ae *openai.Error
				if errors.As(err, &ae) {
					t.Errorf("%s: %d %s: %s", c.name, ae.StatusCode, ae.Code, ae.Message)
				} else {
					t.Errorf("%s: %v", c.name, err)
				}
			}
			answers <- answer{id, dedup}
		}
		go send(c.first)
		select {
		case <-g.arrivals: // the first is at the provider
		case a := <-answers:
			t.Fatalf("%s: the first was answered (%+v) without reaching the provider", c.name, a)
		}
		go send(c.other)
		// The second is in flight on the other gateway when the provider
		// answers the first, or it finds the answer stored: joined or
		// replayed, never a second generation. (A join across replicas is
		// counted when it ends, so no metric says when it began.)
		g.letThrough()
		a, b := <-answers, <-answers
		if a.dedup != "miss" {
			a, b = b, a
		}
		if a.id == "" || a.id != b.id || a.dedup != "miss" || (b.dedup != "joined" && b.dedup != "replayed") {
			t.Fatalf("%s: answers %+v and %+v, want one request: a miss, and a join or a replay", c.name, a, b)
		}
		if n := f.primary.Stats().Requests - before; n != 1 {
			t.Fatalf("%s: the provider saw %d calls, want 1", c.name, n)
		}
	}
}
