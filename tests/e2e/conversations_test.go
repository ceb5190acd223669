package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/postgres"
	"github.com/oncegate/oncegate/internal/ledger/sqlite"
	"github.com/oncegate/oncegate/internal/mock"
)

const statefulConfig = `
tenants: [{id: e2e, api_key_env: ONCEGATE_E2E_KEY}]
providers: [{id: rs, type: openai-responses, base_url: "MOCK/v1", timeouts: {connect: 1s, first_byte: 60s, idle: 60s}}]
routes:
  - {id: rs, provider: rs, model: rs-model, behavior_class: c, data_boundary: local, max_attempts: 2,
     capabilities: {streaming: true, max_context_tokens: 100000, max_output_tokens: 1000}, price: {input_usd_per_mtok: 1, output_usd_per_mtok: 2}}
models:
  - {name: convo, routes: [rs], retry: {max_attempts: 2, base_delay: 10ms, max_delay: 50ms, deadline: 60s}}
lease: {ttl: 2s, renew: 500ms}
`

// postTurn sends one turn of a conversation and returns the status and
// the response object (or error body).
func (g *gateway) postTurn(ctx context.Context, key, body string) (int, map[string]any, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m, err
}

// turnAfterCrash sends a turn again to a gateway restarted after a crash:
// until the dead process's lease lapses (PostgreSQL) the turn's try is
// still in progress (409); then it must answer 200.
func (g *gateway) turnAfterCrash(t *testing.T, key, body string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, m, err := g.postTurn(context.Background(), key, body)
		if err != nil {
			t.Fatal(err)
		}
		if st == 409 && time.Now().Before(deadline) {
			continue
		}
		if st != 200 {
			t.Fatalf("the turn after the crash: %d %v", st, m)
		}
		return m
	}
}

func outputText(m map[string]any) string {
	var s string
	out, _ := m["output"].([]any)
	for _, o := range out {
		content, _ := o.(map[string]any)["content"].([]any)
		for _, c := range content {
			if t, ok := c.(map[string]any)["text"].(string); ok {
				s += t
			}
		}
	}
	return s
}

// A gateway killed while the provider holds a committed turn whose reply
// never came: after a restart the turn is unknown, is reconciled against
// the provider's conversation on the next request, and its committed
// answer is adopted — no second generation, no duplicate turn.
func TestCrashDuringAStatefulTurn(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{Tokens: 8}, b)
		if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(statefulConfig, "MOCK", mockURL(t, w))+b.ledgerLine()), 0o644); err != nil {
			t.Fatal(err)
		}
		g := w.start()
		ctx := context.Background()
		st, first, err := g.postTurn(ctx, "t1", `{"model":"convo","input":"hello"}`)
		if err != nil || st != 200 {
			t.Fatalf("turn 1: %d %v %v", st, first, err)
		}
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultCommitThenHang}}}})
		body := `{"model":"convo","input":"and then?","previous_response_id":"` + first["id"].(string) + `"}`
		go func() { _, _, _ = g.postTurn(ctx, "t2", body) }()
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.StoredResponses() < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the provider never committed turn 2")
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.kill(t)
		w.mock.SetScript(mock.Script{}) // healthy now: a blind re-send would succeed, and duplicate the turn
		generated := w.mock.Stats().Requests
		g2 := w.start()
		second := g2.turnAfterCrash(t, "t2", body)
		if n := w.mock.Stats().Requests; n != generated {
			t.Fatalf("the provider generated %d times after the crash: a blind re-send", n-generated)
		}
		want := mock.AnswerTo(0, "", []string{"hello", outputText(first), "and then?"}, 8)
		if got := outputText(second); got != want {
			t.Fatalf("turn 2 adopted %q, the provider committed %q", got, want)
		}
		// The conversation goes on, and the provider holds each turn once.
		st, third, err := g2.postTurn(ctx, "", `{"model":"convo","input":"thanks","previous_response_id":"`+second["id"].(string)+`"}`)
		if err != nil || st != 200 {
			t.Fatalf("turn 3: %d %v %v", st, third, err)
		}
		if n := w.mock.StoredResponses(); n != 3 {
			t.Fatalf("the provider stored %d responses for 3 turns", n)
		}
	})
}

// mockURL is the base URL the world's configuration names for its mock.
func mockURL(t *testing.T, w *world) string {
	t.Helper()
	b, err := os.ReadFile(w.config)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "http://")
	j := strings.Index(string(b)[i:], "/v1")
	return string(b)[i : i+j]
}

// A gateway killed mid-turn on a chat route, where the gateway holds the
// conversation: after a restart the turn is unknown (its attempt was out),
// and the same turn sent again runs it once more on the same parent — the
// conversation holds it once, and the next turn reads it once.
func TestCrashDuringAGatewayHeldTurn(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{Tokens: 8}, b)
		g := w.start()
		ctx := context.Background()
		st, first, err := g.postTurn(ctx, "", `{"model":"chat","input":"hello"}`)
		if err != nil || st != 200 {
			t.Fatalf("turn 1: %d %v %v", st, first, err)
		}
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultHang}}}})
		body := `{"model":"chat","input":"and then?","previous_response_id":"` + first["id"].(string) + `"}`
		go func() { _, _, _ = g.postTurn(ctx, "t2", body) }()
		deadline := time.Now().Add(10 * time.Second)
		for w.mock.Stats().Requests < 2 {
			if time.Now().After(deadline) {
				t.Fatal("turn 2 never reached the provider")
			}
			time.Sleep(10 * time.Millisecond)
		}
		g.kill(t)
		w.mock.SetScript(mock.Script{})
		g2 := w.start()
		second := g2.turnAfterCrash(t, "t2", body)
		st, third, err := g2.postTurn(ctx, "", `{"model":"chat","input":"thanks","previous_response_id":"`+second["id"].(string)+`"}`)
		if err != nil || st != 200 {
			t.Fatalf("turn 3: %d %v %v", st, third, err)
		}
		want := mock.AnswerTo(0, "", []string{"hello", outputText(first), "and then?", outputText(second), "thanks"}, 8)
		if got := outputText(third); got != want {
			t.Fatalf("turn 3 read the conversation otherwise: got %q want %q", got, want)
		}
		if n := w.mock.Stats().Requests; n != 4 {
			t.Fatalf("%d upstream calls: turn 1, turn 2's lost try and its retry, turn 3", n)
		}
	})
}

// A gateway killed while it removes an orphaned copy of a stateful turn
// (the provider's own infrastructure committed the turn twice, then
// answered 502): the removal stops between the copy's two items. After a
// restart the turn reads one generation, not the kept answer run on into
// the copy's; the provider's conversation holds the turn once, so the
// next turn is generated from what the client read; and the copy is
// recorded once, with its cost.
func TestCrashWhileRemovingAnOrphan(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		w := newWorldOn(t, mock.Config{Tokens: 8}, b)
		if err := os.WriteFile(w.config, []byte(strings.ReplaceAll(statefulConfig, "MOCK", mockURL(t, w))+b.ledgerLine()), 0o644); err != nil {
			t.Fatal(err)
		}
		w.mock.SetScript(mock.Script{Rules: []mock.Rule{{Calls: []int{1}, Fault: mock.Fault{Type: mock.FaultCommitTwiceThen502}}}})
		g := w.start("ONCEGATE_FAILPOINT=between_orphan_item_removals")
		ctx := context.Background()
		body := `{"model":"convo","input":"hello"}`
		go func() { _, _, _ = g.postTurn(ctx, "t1", body) }()
		g.stderr.wait(t, regexp.MustCompile(`ONCEGATE_FAILPOINT between_orphan_item_removals reached`), 10*time.Second)
		g.kill(t)
		generated := w.mock.Stats().Requests
		g2 := w.start()
		first := g2.turnAfterCrash(t, "t1", body)
		if n := w.mock.Stats().Requests; n != generated {
			t.Fatalf("the provider generated %d times after the crash", n-generated)
		}
		if got, want := outputText(first), mock.AnswerFor(0, "hello", 8); got != want {
			t.Fatalf("turn 1 read %q, the provider generated %q", got, want)
		}
		st, second, err := g2.postTurn(ctx, "", `{"model":"convo","input":"and then?","previous_response_id":"`+first["id"].(string)+`"}`)
		if err != nil || st != 200 {
			t.Fatalf("turn 2: %d %v %v", st, second, err)
		}
		want := mock.AnswerTo(0, "", []string{"hello", outputText(first), "and then?"}, 8)
		if got := outputText(second); got != want {
			t.Fatalf("turn 2 was generated from another conversation than the client read: got %q want %q", got, want)
		}
		if n := w.mock.StoredResponses(); n != 3 {
			t.Fatalf("the provider stored %d responses: two copies of turn 1 and turn 2", n)
		}
		g2.kill(t)
		orphans := w.orphans(t, "e2e", first["id"].(string))
		if len(orphans) != 1 || orphans[0].OutputTokens == 0 || orphans[0].Cost <= 0 {
			t.Fatalf("the copy should be recorded once, with its tokens and their cost: %s", orphanList(orphans))
		}
	})
}

// orphans reads a conversation's recorded orphans from the world's store
// (no gateway may be writing it).
func (w *world) orphans(t *testing.T, tenant, conversation string) []*ledger.Orphan {
	t.Helper()
	ctx := context.Background()
	var ts interface {
		Orphans(ctx context.Context, tenant, conversation string) ([]*ledger.Orphan, error)
		Close() error
	}
	if strings.HasPrefix(w.store, "postgres") {
		s, err := postgres.OpenReadOnly(ctx, w.store)
		if err != nil {
			t.Fatal(err)
		}
		ts = s
	} else {
		s, err := sqlite.OpenReadOnly(w.db)
		if err != nil {
			t.Fatal(err)
		}
		ts = s
	}
	defer ts.Close()
	out, err := ts.Orphans(ctx, tenant, conversation)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func orphanList(os []*ledger.Orphan) string {
	var b strings.Builder
	for _, o := range os {
		fmt.Fprintf(&b, "%+v; ", *o)
	}
	return b.String()
}

// sendTurn posts a turn and returns the exchange.
func (g *gateway) sendTurn(ctx context.Context, key, body string) call {
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return call{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return call{status: res.StatusCode, header: res.Header, body: b, err: err}
}

// responseOf is the response object an answer carries: the JSON body, or
// a stream's response.completed event's.
func responseOf(c call) map[string]any {
	var m map[string]any
	if c.header.Get("Content-Type") != "text/event-stream" {
		_ = json.Unmarshal(c.body, &m)
		return m
	}
	for _, line := range strings.Split(string(c.body), "\n") {
		var ev struct {
			Type     string         `json:"type"`
			Response map[string]any `json:"response"`
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "response.completed" {
			return ev.Response
		}
	}
	return nil
}

// Two replicas on PostgreSQL and Redis hold one conversation: a response
// continued on one replica can be continued again on the other (a
// branch); a turn asked again on the other replica in the other form is
// the same turn, finished (replayed) or still streaming there (joined,
// answered as JSON when it ends); and a response deleted on one replica
// is not served again to its key on the other.
func TestConversationAcrossReplicas(t *testing.T) {
	f := newFleet(t, 2, mock.Config{Tokens: 8}, "")
	a, b := f.gws[0], f.gws[1]
	ctx := context.Background()
	turn := func(input, prev string, stream bool) string {
		m := map[string]any{"model": "chat", "input": input, "stream": stream}
		if prev != "" {
			m["previous_response_id"] = prev
		}
		body, _ := json.Marshal(m)
		return string(body)
	}
	root := responseOf(a.sendTurn(ctx, "r1", turn("hello", "", false)))
	rootID, _ := root["id"].(string)
	x := b.sendTurn(ctx, "r2", turn("and then?", rootID, false))
	y := a.sendTurn(ctx, "r3", turn("and otherwise?", rootID, false))
	xObj, yObj := responseOf(x), responseOf(y)
	if x.status != 200 || y.status != 200 || xObj["id"] == yObj["id"] || yObj["previous_response_id"] != rootID {
		t.Fatalf("two continuations of one response, on two replicas: %v; %v", x, y)
	}
	again := a.sendTurn(ctx, "r2", turn("and then?", rootID, true))
	if obj := responseOf(again); again.status != 200 || obj["id"] != xObj["id"] || outputText(obj) != outputText(xObj) ||
		again.header.Get("X-Oncegate-Dedup") != "replayed" {
		t.Fatalf("turn r2 asked again on the other replica as a stream: %v", again)
	}

	// A stream on replica a pauses after two tokens; the same turn asked
	// as JSON on replica b follows it there, and reads the whole answer.
	calls := f.primary.Stats().Requests
	f.primary.SetScript(mock.Script{Rules: []mock.Rule{{Calls: []int{int(calls) + 1}, Fault: mock.Fault{Type: mock.FaultSlowFirstToken, After: 2, DelayMS: 1500}}}})
	req, _ := http.NewRequestWithContext(ctx, "POST", a.url+"/v1/responses", strings.NewReader(turn("go on", xObj["id"].(string), true)))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", "r4")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the stream: %v %v", res, err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	var streamed strings.Builder
	for !strings.Contains(streamed.String(), "response.output_text.delta") {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream before its pause: %v", err)
		}
		streamed.WriteString(line)
	}
	joined := b.sendTurn(ctx, "r4", turn("go on", xObj["id"].(string), false))
	rest, _ := io.ReadAll(rd)
	streamed.Write(rest)
	owner := responseOf(call{header: res.Header, body: []byte(streamed.String())})
	if obj := responseOf(joined); joined.status != 200 || joined.header.Get("Content-Type") != "application/json" || obj["id"] != owner["id"] ||
		outputText(obj) != outputText(owner) || outputText(obj) == "" || joined.header.Get("X-Oncegate-Dedup") != "joined" {
		t.Fatalf("the turn asked as JSON on the other replica while it streams: %v (the stream read %v %q)", joined, owner["id"], outputText(owner))
	}
	if n := f.primary.Stats().Requests - calls; n != 1 {
		t.Fatalf("%d upstream generations for one turn", n)
	}

	// Deleted on one replica, not served again on the other.
	del, _ := http.NewRequest("DELETE", b.url+"/v1/responses/"+xObj["id"].(string), nil)
	del.Header.Set("Authorization", "Bearer "+apiKey)
	if res, err := http.DefaultClient.Do(del); err != nil || res.StatusCode != 200 {
		t.Fatalf("delete: %v %v", res, err)
	}
	for _, stream := range []bool{false, true} {
		c := a.sendTurn(ctx, "r2", turn("and then?", rootID, stream))
		if c.status != 404 || strings.Contains(string(c.body), outputText(xObj)) || !strings.Contains(string(c.body), "response_not_found") {
			t.Fatalf("the deleted turn's key on the other replica (stream %v): %v", stream, c)
		}
	}
}
