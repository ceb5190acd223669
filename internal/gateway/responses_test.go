package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/api"
	"github.com/oncegate/oncegate/internal/conversation"
	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/identity"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/receipt"
)

// conversationAnswer is the mock's answer to a conversation: the user
// texts in order, each followed by the answer before it.
func conversationAnswer(users []string, n int) (answers []string) {
	var texts []string
	for _, u := range users {
		texts = append(texts, u)
		a := mock.AnswerTo(0, "", texts, n)
		answers = append(answers, a)
		texts = append(texts, a)
	}
	return answers
}

func TestResponsesChainThroughTheSDK(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		var h http.Header
		c := e.openai(&h)
		users := []string{"hello", "tell me more", "and then?", "thanks"}
		want := conversationAnswer(users, 8)
		prev := ""
		var ids []string
		for i, u := range users {
			p := responses.ResponseNewParams{Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(u)}}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			var text, id string
			if i%2 == 0 {
				res, err := c.Responses.New(ctx, p)
				if err != nil {
					t.Fatalf("turn %d: %v", i+1, err)
				}
				text, id = res.OutputText(), res.ID
				if res.Status != "completed" || res.Usage.OutputTokens == 0 || (prev != "" && res.PreviousResponseID != prev) {
					t.Fatalf("turn %d: %+v", i+1, res)
				}
			} else {
				st := c.Responses.NewStreaming(ctx, p)
				var deltas strings.Builder
				var kinds []string
				for st.Next() {
					ev := st.Current()
					kinds = append(kinds, ev.Type)
					switch ev.Type {
					case "response.output_text.delta":
						deltas.WriteString(ev.Delta)
					case "response.completed":
						text, id = ev.Response.OutputText(), ev.Response.ID
					}
				}
				if err := st.Err(); err != nil {
					t.Fatalf("turn %d stream: %v", i+1, err)
				}
				if deltas.String() != text {
					t.Fatalf("turn %d: deltas %q, completed %q", i+1, deltas.String(), text)
				}
				if kinds[0] != "response.created" || kinds[1] != "response.in_progress" || kinds[len(kinds)-1] != "response.completed" {
					t.Fatalf("turn %d: event sequence %v", i+1, kinds)
				}
			}
			if text != want[i] {
				t.Fatalf("turn %d: got %q want %q (the whole conversation goes upstream)", i+1, text, want[i])
			}
			r := e.receipt(h.Get("X-Oncegate-Request-Id"))
			if r.Operation != "responses" || r.Conversation == nil || r.Conversation.ResponseID != id || r.Conversation.Turn != i+1 ||
				r.Conversation.UserTurns != i+1 || r.Conversation.AssistantTurns != i+1 {
				t.Fatalf("turn %d receipt: %+v %+v", i+1, r, r.Conversation)
			}
			ids = append(ids, id)
			prev = id
		}
		got, err := c.Responses.Get(ctx, ids[1], responses.ResponseGetParams{})
		if err != nil || got.OutputText() != want[1] || got.PreviousResponseID != ids[0] {
			t.Fatalf("get: %v %+v", err, got)
		}
		items, err := c.Responses.InputItems.List(ctx, ids[2], responses.InputItemListParams{})
		if err != nil || len(items.Data) != 1 || items.Data[0].Role != "user" || len(items.Data[0].Content.OfInputItemContentList) != 1 || items.Data[0].Content.OfInputItemContentList[0].Text != users[2] {
			t.Fatalf("input items: %v %+v", err, items)
		}
		if err := c.Responses.Delete(ctx, ids[3]); err != nil {
			t.Fatal(err)
		}
		_, err = c.Responses.Get(ctx, ids[3], responses.ResponseGetParams{})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != api.CodeResponseNotFound {
			t.Fatalf("a deleted response: %v", err)
		}
		if calls := e.primary.Stats().Requests; calls != int64(len(users)) {
			t.Fatalf("%d upstream calls for %d turns", calls, len(users))
		}
	})
}

func TestResponsesOnAnAnthropicRoute(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.openai(nil)
		res, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "claude", Instructions: openai.String("be brief"),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputText() == "" || e.anthropic.Stats().Requests != 1 {
			t.Fatalf("%+v, %d anthropic calls", res, e.anthropic.Stats().Requests)
		}
		st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "claude", PreviousResponseID: openai.String(res.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again")}})
		n := 0
		for st.Next() {
			n++
		}
		if st.Err() != nil || n < 5 {
			t.Fatalf("stream: %v after %d events", st.Err(), n)
		}
	})
}

// A retry of a turn — the same key, or the same body on the same parent
// while the turn runs or within the replay windows — continues it: one
// upstream call, one answer, one turn. Any other turn on a response is a
// branch of the conversation, served as OpenAI serves it: a regenerated
// answer, an edited question.
//
// The provider takes 50 ms (fake time) to answer: time in the bubble moves
// only once every arrival is placed, so the eight arrive while their turn
// runs however the machine schedules them — without it, a keyless arrival
// scheduled after its turn finished was a new branch, and the test failed
// on a loaded machine.
func TestResponsesRetriesNeverAppendAndBranchesAreServed(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5, TTFT: 50 * time.Millisecond}}, func(t *testing.T, e *env) {
		send := func(body string, hdr map[string]string) (int, map[string]any, http.Header) {
			res, b := e.post("/v1/responses", body, hdr)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			return res.StatusCode, m, res.Header
		}
		st, root, _ := send(`{"model":"chat","input":"start"}`, nil)
		if st != 200 {
			t.Fatalf("root: %d %v", st, root)
		}
		rootID := root["id"].(string)
		body := `{"model":"chat","input":"next","previous_response_id":"` + rootID + `"}`
		// Concurrent re-POSTs of one keyed turn are one turn; so are
		// concurrent keyless ones of one body (a key names a user action
		// of its own: the keyless ones are another).
		var wg sync.WaitGroup
		ids := make([]string, 8)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hdr := map[string]string{"Idempotency-Key": "turn-2"}
				if i%2 == 1 {
					hdr = nil
				}
				st, m, _ := send(body, hdr)
				if st != 200 {
					t.Errorf("arrival %d: %d %v", i, st, m)
					return
				}
				ids[i] = m["id"].(string)
			}()
		}
		wg.Wait()
		keyed, keyless := ids[0], ids[1]
		for i, id := range ids {
			if want := []string{keyed, keyless}[i%2]; id != want {
				t.Fatalf("one turn answered under several ids: %v", ids)
			}
		}
		if calls := e.primary.Stats().Requests; calls != 3 {
			t.Fatalf("%d upstream calls for three turns", calls)
		}
		// A re-POST after the turn finished replays it: under its key, or
		// as an SDK's retry within idempotency.sdk_retry_window.
		if st, m, hdr := send(body, map[string]string{"Idempotency-Key": "turn-2"}); st != 200 || m["id"] != keyed || hdr.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("keyed replay: %d %v %v", st, m, hdr)
		}
		if st, m, hdr := send(body, map[string]string{"X-Stainless-Retry-Count": "1"}); st != 200 || m["id"] != keyless || hdr.Get("X-Oncegate-Dedup") != "replayed" {
			t.Fatalf("keyless SDK retry: %d %v %v", st, m, hdr)
		}
		// The same question asked again later, with no key, is a new
		// user action: a regenerated answer, a branch of its own.
		st, again, hdr := send(body, nil)
		if st != 200 || again["id"] == keyless || again["id"] == keyed || hdr.Get("X-Oncegate-Dedup") != "miss" || again["previous_response_id"] != rootID {
			t.Fatalf("regenerate: %d %v %v", st, again, hdr)
		}
		// A different continuation of the same parent (an edited
		// question) is a branch too.
		st, edited, _ := send(`{"model":"chat","input":"something else","previous_response_id":"`+rootID+`"}`, map[string]string{"Idempotency-Key": "other"})
		want := conversationAnswer([]string{"start", "something else"}, 5)[1]
		if st != 200 || edited["previous_response_id"] != rootID || outputOf(edited) != want {
			t.Fatalf("edit: %d %v, want %q (the branch reads its own history)", st, edited, want)
		}
		// The same key with another body is a reused key.
		if st, m, _ := send(`{"model":"chat","input":"one"}`, map[string]string{"Idempotency-Key": "k-first"}); st != 200 {
			t.Fatalf("keyed first turn: %d %v", st, m)
		}
		st, m, _ := send(`{"model":"chat","input":"two"}`, map[string]string{"Idempotency-Key": "k-first"})
		if st != 422 || errCode(m) != api.CodeKeyReused {
			t.Fatalf("reused key: %d %v", st, m)
		}
		// Each branch goes on with its own history.
		st, m, _ = send(`{"model":"chat","input":"go on","previous_response_id":"`+edited["id"].(string)+`"}`, nil)
		want = conversationAnswer([]string{"start", "something else", "go on"}, 5)[2]
		if st != 200 || m["previous_response_id"] != edited["id"] || outputOf(m) != want {
			t.Fatalf("continue a branch: %d %v, want %q", st, m, want)
		}
		if st, m, _ = send(`{"model":"chat","input":"x","previous_response_id":"resp_missing"}`, nil); st != 404 || errCode(m) != api.CodeResponseNotFound {
			t.Fatalf("missing parent: %d %v", st, m)
		}
		turns, err := e.gw.ledger.ConversationTurns(context.Background(), "acme", rootID)
		if err != nil || len(turns) != 6 {
			t.Fatalf("the conversation holds %d turns: %v", len(turns), err)
		}
		branches := map[int]bool{}
		for _, tr := range turns {
			if tr.Parent == rootID {
				branches[tr.Branch] = true
			}
		}
		if len(branches) != 4 || !branches[0] || !branches[3] {
			t.Fatalf("the root's four continuations are branches %v", branches)
		}
		if calls := e.primary.Stats().Requests; calls != 7 {
			t.Fatalf("%d upstream calls for seven turns", calls)
		}
		if b := e.metricsText(); !strings.Contains(string(b), "oncegate_conversation_branches_total 3\n") {
			t.Fatal("/metrics does not count the three branches")
		}
	})
}

// outputOf is a response object's output text.
func outputOf(m map[string]any) string {
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

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// streamTurn posts a streaming turn and returns the event types it read,
// the response id and the status of its last event.
func streamTurn(t *testing.T, e *env, body string, hdr map[string]string) (kinds []string, id string) {
	t.Helper()
	res, b := e.post("/v1/responses", body, hdr)
	if res.StatusCode != 200 {
		t.Fatalf("stream turn: %d %s", res.StatusCode, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev struct {
				Type     string `json:"type"`
				Response struct {
					ID string `json:"id"`
				} `json:"response"`
			}
			_ = json.Unmarshal([]byte(data), &ev)
			kinds = append(kinds, ev.Type)
			if ev.Response.ID != "" {
				id = ev.Response.ID
			}
		}
	}
	return kinds, id
}

// A turn whose stream broke after output, and could not be finished, is
// unknown: a retry runs it again on the same parent; after max_ambiguous
// such tries it is given up with a clear error, and the conversation goes
// on from its parent, unbranched.
func TestResponsesAmbiguousTurnsAreRetriedThenGivenUp(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 12}}, func(t *testing.T, e *env) {
		res, b := e.post("/v1/responses", `{"model":"chat-stop","input":"start"}`, nil)
		var root struct{ ID string }
		if res.StatusCode != 200 || json.Unmarshal(b, &root) != nil {
			t.Fatalf("root: %d %s", res.StatusCode, b)
		}
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultDropAfter, After: 4})))
		body := `{"model":"chat-stop","stream":true,"input":"go on","previous_response_id":"` + root.ID + `"}`
		key := map[string]string{"Idempotency-Key": "turn-2"}
		var id string
		for try := 1; try <= 2; try++ {
			kinds, got := streamTurn(t, e, body, key)
			if kinds[len(kinds)-2] != "error" || kinds[len(kinds)-1] != "response.failed" {
				t.Fatalf("try %d: a stream that cannot finish ends with error and response.failed: %v", try, kinds)
			}
			if id != "" && got != id {
				t.Fatalf("try %d answered as %s, the turn is %s", try, got, id)
			}
			id = got
		}
		turn, err := e.gw.ledger.Turn(context.Background(), "acme", id)
		if err != nil || turn.State != "failed" || turn.Try != 2 || turn.Ambiguous != 2 {
			t.Fatalf("after two ambiguous tries: %+v %v", turn, err)
		}
		res, b = e.post("/v1/responses", body, key)
		if res.StatusCode != 502 || !strings.Contains(string(b), "given up") {
			t.Fatalf("a retry of the given-up turn: %d %s", res.StatusCode, b)
		}
		if calls := e.primary.Stats().Requests; calls != 3 {
			t.Fatalf("%d upstream calls, want the root and two tries", calls)
		}
		// The conversation is consistent and usable: it continues from
		// the root, and the given-up turn is not in it.
		e.primary.SetScript(mock.Script{})
		res, b = e.post("/v1/responses", `{"model":"chat-stop","input":"once more","previous_response_id":"`+root.ID+`"}`, nil)
		var next struct {
			ID     string
			Output []struct {
				Content []struct{ Text string }
			}
		}
		if res.StatusCode != 200 || json.Unmarshal(b, &next) != nil {
			t.Fatalf("continue from the root: %d %s", res.StatusCode, b)
		}
		want := conversationAnswer([]string{"start", "once more"}, 12)
		if got := next.Output[0].Content[0].Text; got != want[1] {
			t.Fatalf("the given-up turn leaked into the conversation: %q want %q", got, want[1])
		}
	})
}

// itemText is an item's role or type and its text, for comparing a
// conversation item for item.
func itemText(it provider.Item) string {
	s := it.Type + "/" + it.Role + ":"
	for _, p := range it.Content {
		if p.Text != nil {
			s += *p.Text
		}
	}
	return s
}

// mockItemText is itemText for an item the mock provider stores.
func mockItemText(it mock.Item) string {
	s := it.Type + "/" + it.Role + ":"
	if it.Type == provider.ItemMessage {
		s += it.Text()
	}
	return s
}

// On a stateful route the provider keeps the conversation. Replies lost
// after the provider committed them are reconciled, never re-sent blind:
// found, the answer is adopted; absent, the turn is retried; twice, one
// copy is kept and the other removed upstream and recorded as an orphan.
// The provider's conversation ends item for item the gateway's.
func TestStatefulTurnsAreReconciledNotDuplicated(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		up := e.fallback
		var h http.Header
		c := e.openai(&h)
		faults := []*mock.Fault{
			nil,
			{Type: mock.FaultCommitThenHang},
			{Type: mock.FaultCommitThenReset, After: 3},
			{Type: mock.FaultCommitTwiceThen502},
			{Type: mock.FaultHang},
			nil,
		}
		wantReconciled := []string{"", "found", "found", "found", "absent", ""}
		prev, attempts := "", 0
		var ids []string
		for i, f := range faults {
			up.SetScript(mock.Script{})
			if f != nil {
				up.SetScript(rules(mock.Rule{Calls: []int{int(up.Stats().Requests) + 1}, Fault: *f}))
			}
			p := responses.ResponseNewParams{Model: "convo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("turn " + string(rune('a'+i)))}}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			var text string
			if i == 2 {
				st := c.Responses.NewStreaming(ctx, p)
				var deltas strings.Builder
				for st.Next() {
					switch ev := st.Current(); ev.Type {
					case "response.output_text.delta":
						deltas.WriteString(ev.Delta)
					case "response.completed":
						prev = ev.Response.ID
					}
				}
				if err := st.Err(); err != nil {
					t.Fatalf("turn %d: %v", i+1, err)
				}
				text = deltas.String()
			} else {
				res, err := c.Responses.New(ctx, p)
				if err != nil {
					t.Fatalf("turn %d: %v", i+1, err)
				}
				text, prev = res.OutputText(), res.ID
			}
			if text == "" {
				t.Fatalf("turn %d: no answer", i+1)
			}
			ids = append(ids, prev)
			r := e.receipt(h.Get("X-Oncegate-Request-Id"))
			attempts += len(r.Attempts)
			if got := r.Attempts[0].Reconciled; got != wantReconciled[i] || r.Terminal != "succeeded" {
				t.Fatalf("turn %d: first attempt reconciled %q, want %q (%+v)", i+1, got, wantReconciled[i], r.Attempts)
			}
		}
		if calls := up.Stats().Requests; calls != int64(attempts) {
			t.Fatalf("the provider saw %d generation calls, the receipts hold %d attempts", calls, attempts)
		}
		// The provider's conversation is the gateway's, item for item.
		turns, err := e.gw.ledger.ConversationTurns(ctx, "acme", ids[0])
		if err != nil || len(turns) != len(faults) {
			t.Fatalf("%d turns: %v", len(turns), err)
		}
		items, err := conversation.HistoryItems(ledger.Chain(turns, ids[len(ids)-1]))
		if err != nil {
			t.Fatal(err)
		}
		conv := conversation.ReadUpstream(turns[len(turns)-1].Upstream).Conversation
		stored := up.Conversation(conv)
		if len(stored) != len(items) {
			t.Fatalf("the provider holds %d items, the gateway %d", len(stored), len(items))
		}
		for i := range items {
			if mockItemText(stored[i]) != itemText(items[i]) {
				t.Fatalf("item %d: provider %q, gateway %q", i, mockItemText(stored[i]), itemText(items[i]))
			}
		}
		orphans, err := e.gw.ledger.Orphans(ctx, "acme", ids[0])
		if err != nil || len(orphans) != 1 || orphans[0].Cost <= 0 || orphans[0].ResponseID != ids[3] {
			t.Fatalf("orphans: %+v %v", orphans, err)
		}
		// An orphan is spend: the tenant's day holds what every receipt
		// charged and what the orphan cost, which the receipt of the
		// attempt that found it names.
		var charged gw.NanoUSD
		pages, _ := e.gw.ledger.Receipts(ctx, "acme", 100, "")
		for _, b := range pages {
			r, _ := receipt.Parse(b)
			charged += gw.NanoFromUSD(r.Totals.CostUSD)
			for _, a := range r.Attempts {
				if a.Orphans > 0 && gw.NanoFromUSD(a.OrphansCostUSD) != gw.NanoUSD(orphans[0].Cost) {
					t.Fatalf("the attempt that found the orphan says it cost $%v; it cost %d nano-USD", a.OrphansCostUSD, orphans[0].Cost)
				}
			}
		}
		if spend, err := e.gw.ledger.Spend(ctx, ledger.Day(time.Now())); err != nil || spend["acme"] != int64(charged)+orphans[0].Cost {
			t.Fatalf("the day's spend %v (%v); the receipts charged %d and the orphan cost %d", spend, err, charged, orphans[0].Cost)
		}
		b := e.metricsText()
		for _, line := range []string{`oncegate_turns_total{role="user"} 6`, `oncegate_turns_total{role="assistant"} 6`,
			"oncegate_turn_ratio 1", "oncegate_orphaned_turns_total 1"} {
			if !strings.Contains(string(b), line+"\n") {
				t.Fatalf("/metrics lacks %q", line)
			}
		}
	})
}

// Function tools go both ways, and a streaming turn whose provider broke
// mid-answer is resumed as a chat stream is: the client reads one answer.
func TestResponsesToolsAndResumedStreams(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 10}}, func(t *testing.T, e *env) {
		res, b := e.post("/v1/responses", `{"model":"chat","input":"look it up","tools":[{"type":"function","name":"lookup",
			"parameters":{"type":"object","properties":{"query":{"type":"string"}}}}]}`, nil)
		var first struct {
			ID     string
			Output []struct {
				Type, Name, Arguments string
				CallID                string `json:"call_id"`
			}
			Tools []map[string]any
		}
		if res.StatusCode != 200 || json.Unmarshal(b, &first) != nil || len(first.Output) != 1 {
			t.Fatalf("tool turn: %d %s", res.StatusCode, b)
		}
		call := first.Output[0]
		if call.Type != "function_call" || call.Name != "lookup" || call.CallID == "" || call.Arguments != `{"query": "oncegate receipts"}` ||
			len(first.Tools) != 1 {
			t.Fatalf("tool call: %s", b)
		}
		res, b = e.post("/v1/responses", `{"model":"chat","previous_response_id":"`+first.ID+`","tools":[{"type":"function","name":"lookup"}],
			"input":[{"type":"function_call_output","call_id":"`+call.CallID+`","output":"42"}]}`, nil)
		if res.StatusCode != 200 || !strings.Contains(string(b), `"output_text"`) {
			t.Fatalf("the tool's result: %d %s", res.StatusCode, b)
		}
		// A stream that breaks after 3 tokens is continued on the fallback.
		e.primary.SetScript(rules(mock.Rule{Calls: []int{e.primaryCalls() + 1}, Fault: mock.Fault{Type: mock.FaultDropAfter, After: 3}}))
		var h http.Header
		oc := e.openai(&h)
		st := oc.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "chat-pair",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("a long answer please")}})
		var deltas strings.Builder
		final := ""
		for st.Next() {
			switch ev := st.Current(); ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed":
				final = ev.Response.OutputText()
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		want := conversationAnswer([]string{"a long answer please"}, 10)[0]
		if deltas.String() != want || final != want {
			t.Fatalf("resumed turn: deltas %q, completed %q, want %q", deltas.String(), final, want)
		}
		r := e.receipt(h.Get("X-Oncegate-Request-Id"))
		if len(r.Attempts) != 2 || r.Attempts[1].Purpose != "resume" {
			t.Fatalf("receipt: %+v", r.Attempts)
		}
	})
}

func (e *env) primaryCalls() int { return int(e.primary.Stats().Requests) }

// store: false answers once and keeps nothing to read or continue; such
// turns hold no place in the conversation, so several may read one.
func TestResponsesNotStored(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{}, func(t *testing.T, e *env) {
		_, b := e.post("/v1/responses", `{"model":"chat","input":"root"}`, nil)
		var root struct{ ID string }
		_ = json.Unmarshal(b, &root)
		var ids []string
		for _, in := range []string{"one", "two"} {
			res, b := e.post("/v1/responses", `{"model":"chat","store":false,"input":"`+in+`","previous_response_id":"`+root.ID+`"}`, nil)
			var m struct {
				ID    string
				Store bool
			}
			if res.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.Store {
				t.Fatalf("not stored %s: %d %s", in, res.StatusCode, b)
			}
			ids = append(ids, m.ID)
		}
		req, _ := http.NewRequest("GET", e.url+"/v1/responses/"+ids[0], nil)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		if res, err := e.client.Do(req); err != nil || res.StatusCode != 404 {
			t.Fatalf("get a response not stored: %v %v", res, err)
		}
		if res, b := e.post("/v1/responses", `{"model":"chat","input":"x","previous_response_id":"`+ids[1]+`"}`, nil); res.StatusCode != 404 {
			t.Fatalf("continue a response not stored: %d %s", res.StatusCode, b)
		}
		if res, b := e.post("/v1/responses", `{"model":"convo","store":false,"input":"x"}`, nil); res.StatusCode != 400 {
			t.Fatalf("store false on a stateful model: %d %s", res.StatusCode, b)
		}
	})
}

// A stateful turn whose attempts keep ending without an answer, and
// without anything committed, is given up after max_ambiguous with a
// clear error; the conversation is consistent and goes on.
func TestStatefulTurnGivenUpAfterMaxAmbiguous(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}}, func(t *testing.T, e *env) {
		_, b := e.post("/v1/responses", `{"model":"convo","input":"first"}`, nil)
		var root struct{ ID string }
		_ = json.Unmarshal(b, &root)
		e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultHang})))
		body := `{"model":"convo","input":"second","previous_response_id":"` + root.ID + `"}`
		res, b := e.post("/v1/responses", body, map[string]string{"Idempotency-Key": "k2"})
		if res.StatusCode != 502 || errCodeOf(b) != api.CodeOutcomeUnknown || !strings.Contains(string(b), "given up") ||
			res.Header.Get("x-should-retry") != "false" {
			t.Fatalf("after max_ambiguous: %d %s", res.StatusCode, b)
		}
		if calls := e.fallback.Stats().Requests; calls != 3 {
			t.Fatalf("%d generation calls: the root and 2 ambiguous attempts", calls)
		}
		e.fallback.SetScript(mock.Script{})
		if res, b := e.post("/v1/responses", body, map[string]string{"Idempotency-Key": "k2"}); res.StatusCode != 502 || !strings.Contains(string(b), "given up") {
			t.Fatalf("the given-up turn again: %d %s", res.StatusCode, b)
		}
		res, b = e.post("/v1/responses", body, map[string]string{"Idempotency-Key": "k2-again"})
		if res.StatusCode != 200 {
			t.Fatalf("the conversation goes on: %d %s", res.StatusCode, b)
		}
		var next struct{ ID string }
		_ = json.Unmarshal(b, &next)
		turns, _ := e.gw.ledger.ConversationTurns(context.Background(), "acme", root.ID)
		items, err := conversation.HistoryItems(ledger.Chain(turns, next.ID))
		if err != nil {
			t.Fatal(err)
		}
		stored := e.fallback.Conversation(conversation.ReadUpstream(turns[len(turns)-1].Upstream).Conversation)
		if len(stored) != 4 || len(items) != 4 {
			t.Fatalf("the provider holds %d items, the gateway %d (want 4: two turns)", len(stored), len(items))
		}
	})
}

// On a stateful route a branch cannot go on in its parent's upstream
// conversation, which went on with the parent's first continuation: it
// gets a conversation of its own, seeded with its history, and each
// branch's answer reads its own history only. Both upstream conversations
// hold exactly what their branch's clients read.
func TestStatefulBranchesGetAnUpstreamConversationOfTheirOwn(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 6}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.openai(nil)
		turnOn := func(prev, input string) *responses.Response {
			t.Helper()
			p := responses.ResponseNewParams{Model: "convo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			res, err := c.Responses.New(ctx, p)
			if err != nil {
				t.Fatalf("%q: %v", input, err)
			}
			return res
		}
		root := turnOn("", "first")
		a := turnOn(root.ID, "second")
		b := turnOn(root.ID, "second, said otherwise") // an edited question
		a2 := turnOn(a.ID, "third")
		b2 := turnOn(b.ID, "third")
		for _, tc := range []struct {
			users []string
			got   []*responses.Response
		}{
			{[]string{"first", "second", "third"}, []*responses.Response{root, a, a2}},
			{[]string{"first", "second, said otherwise", "third"}, []*responses.Response{root, b, b2}},
		} {
			want := conversationAnswer(tc.users, 6)
			for i, res := range tc.got {
				if res.OutputText() != want[i] {
					t.Fatalf("%v, turn %d: %q, want %q (the branch reads its own history)", tc.users, i+1, res.OutputText(), want[i])
				}
			}
			turns, err := e.gw.ledger.ConversationTurns(ctx, "acme", root.ID)
			if err != nil {
				t.Fatal(err)
			}
			tip := ledger.Chain(turns, tc.got[2].ID)
			items, err := conversation.HistoryItems(tip)
			if err != nil {
				t.Fatal(err)
			}
			stored := e.fallback.Conversation(conversation.ReadUpstream(tip[2].Upstream).Conversation)
			if len(stored) != len(items) {
				t.Fatalf("%v: the provider's conversation holds %d items, the branch %d", tc.users, len(stored), len(items))
			}
			for i := range items {
				if mockItemText(stored[i]) != itemText(items[i]) {
					t.Fatalf("%v, item %d: provider %q, gateway %q", tc.users, i, mockItemText(stored[i]), itemText(items[i]))
				}
			}
		}
		if n := e.fallback.StoredResponses(); n != 5 {
			t.Fatalf("the provider committed %d responses for five turns", n)
		}
	})
}

// A deleted response is never served again: not to a re-POST of its turn
// under its key (404: the key names the deleted turn), not to a keyless
// retry (a new turn), and not from the record of the try that produced it
// (deleted with it). It cannot be continued (404), its parent can
// (another branch), and no error offers it as the place to go on from.
func TestDeletedResponsesAreNeverReplayed(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		send := func(body string, hdr map[string]string) (int, map[string]any, http.Header, string) {
			res, b := e.post("/v1/responses", body, hdr)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			return res.StatusCode, m, res.Header, string(b)
		}
		del := func(id string) {
			req, _ := http.NewRequest("DELETE", e.url+"/v1/responses/"+id, nil)
			req.Header.Set("Authorization", "Bearer "+keyAcme)
			res, err := e.client.Do(req)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("delete %s: %v %v", id, res, err)
			}
			res.Body.Close()
		}
		_, root, _, _ := send(`{"model":"chat","input":"start"}`, nil)
		rootID := root["id"].(string)
		keyed := `{"model":"chat","input":"keyed","previous_response_id":"` + rootID + `"}`
		st, k, _, _ := send(keyed, map[string]string{"Idempotency-Key": "k-del"})
		if st != 200 {
			t.Fatalf("keyed turn: %d %v", st, k)
		}
		kID, kText := k["id"].(string), outputOf(k)
		if _, err := e.gw.ledger.Get(ctx, ledger.TryIdentity(kID, 1)); err != nil {
			t.Fatalf("the try's record: %v", err)
		}
		del(kID)
		if r, err := e.gw.ledger.Get(ctx, ledger.TryIdentity(kID, 1)); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("the record of the try that answered the deleted response: %+v %v", r, err)
		}
		var m map[string]any
		var b string
		for _, body := range []string{keyed, strings.Replace(keyed, `"model"`, `"stream":true,"model"`, 1)} {
			var hdr http.Header
			st, m, hdr, b = send(body, map[string]string{"Idempotency-Key": "k-del"})
			if st != 404 || errCode(m) != api.CodeResponseNotFound || strings.Contains(b, kText) || hdr.Get("X-Oncegate-Dedup") == "replayed" {
				t.Fatalf("the deleted turn's key again (%s): %d %s", body, st, b)
			}
		}
		calls := e.primaryCalls()
		keyless := `{"model":"chat","input":"keyless","previous_response_id":"` + rootID + `"}`
		_, u, _, _ := send(keyless, nil)
		del(u["id"].(string))
		st, again, hdr, _ := send(keyless, map[string]string{"X-Stainless-Retry-Count": "1"})
		if st != 200 || again["id"] == u["id"] || hdr.Get("X-Oncegate-Dedup") != "miss" || e.primaryCalls() != calls+2 {
			t.Fatalf("a keyless retry of a deleted turn is a new turn: %d %v %v (%d upstream calls)", st, again, hdr, e.primaryCalls()-calls)
		}
		// The deleted response cannot be continued; its parent can.
		st, m, _, _ = send(`{"model":"chat","input":"on","previous_response_id":"`+kID+`"}`, nil)
		if st != 404 || errCode(m) != api.CodeResponseNotFound {
			t.Fatalf("continue a deleted response: %d %v", st, m)
		}
		if st, m, _, _ := send(`{"model":"chat","input":"other","previous_response_id":"`+rootID+`"}`, nil); st != 200 {
			t.Fatalf("continue the deleted response's parent: %d %v", st, m)
		}
		// A turn that failed on a response since deleted: continuing it is
		// refused without offering the deleted response.
		_, p, _, _ := send(`{"model":"chat","input":"parent","previous_response_id":"`+rootID+`"}`, nil)
		pID := p["id"].(string)
		e.primary.SetScript(rules(always(mock.Fault{Type: mock.FaultStatus, Status: 400, Message: "no"})))
		st, f, _, _ := send(`{"model":"chat","input":"fails","previous_response_id":"`+pID+`"}`, nil)
		if st != 400 {
			t.Fatalf("a failing turn: %d %v", st, f)
		}
		e.primary.SetScript(mock.Script{})
		turns, _ := e.gw.ledger.ConversationTurns(ctx, "acme", rootID)
		failed := turns[len(turns)-1]
		if failed.State != ledger.TurnFailed || failed.Parent != pID {
			t.Fatalf("the failed turn: %+v", failed)
		}
		del(pID)
		st, _, _, b = send(`{"model":"chat","input":"on","previous_response_id":"`+failed.ResponseID+`"}`, nil)
		if st != 400 || strings.Contains(b, "continue from "+pID) || !strings.Contains(b, "was deleted") {
			t.Fatalf("continue a failed turn whose parent was deleted: %d %s", st, b)
		}
	})
}

// completedOf reads a Responses event stream's final response object
// (response.completed), or nil.
func completedOf(b []byte) map[string]any {
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string         `json:"type"`
			Response map[string]any `json:"response"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "response.completed" {
			return ev.Response
		}
	}
	return nil
}

// A turn asked again in the other form — as a stream when it was asked
// for as JSON, or the other way round — is the same turn, keyed or
// keyless: a finished one replays in the form asked for, and one still
// running is joined, its answer given in the form asked for once it is
// done. One upstream generation each.
func TestTurnAskedAgainInTheOtherForm(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 8, TTFT: 100 * time.Millisecond, TokenInterval: 20 * time.Millisecond}}, func(t *testing.T, e *env) {
		_, b := e.post("/v1/responses", `{"model":"chat","input":"start"}`, nil)
		var root struct{ ID string }
		_ = json.Unmarshal(b, &root)
		body := func(input string, stream bool) string {
			return `{"model":"chat","stream":` + strconv.FormatBool(stream) + `,"input":"` + input + `","previous_response_id":"` + root.ID + `"}`
		}
		// read is the response object an answer carries, whichever form
		// it came in, checked to be the form asked for.
		read := func(res *http.Response, b []byte, stream bool) map[string]any {
			t.Helper()
			if res.StatusCode != 200 || (res.Header.Get("Content-Type") == "text/event-stream") != stream {
				t.Fatalf("asked for stream %v: %d %s %.300s", stream, res.StatusCode, res.Header.Get("Content-Type"), b)
			}
			if stream {
				return completedOf(b)
			}
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			return m
		}
		for i, tc := range []struct {
			name    string
			hdr     map[string]string // the second arrival's headers (the first's, without the SDK's retry count)
			stream  bool              // the first arrival's form
			running bool              // the second arrives while the first runs
		}{
			{"keyed, finished, JSON then stream", map[string]string{"Idempotency-Key": "k1"}, false, false},
			{"keyed, finished, stream then JSON", map[string]string{"Idempotency-Key": "k2"}, true, false},
			{"keyless SDK retry, finished, JSON then stream", map[string]string{"X-Stainless-Retry-Count": "1"}, false, false},
			{"keyed, running, stream then JSON", map[string]string{"Idempotency-Key": "k3"}, true, true},
			{"keyed, running, JSON then stream", map[string]string{"Idempotency-Key": "k4"}, false, true},
			{"keyless, running, stream then JSON", nil, true, true},
		} {
			input := "turn " + strconv.Itoa(i)
			first := map[string]string{}
			for k, v := range tc.hdr {
				if k != "X-Stainless-Retry-Count" {
					first[k] = v
				}
			}
			calls := e.primaryCalls()
			var firstObj map[string]any
			done := make(chan struct{})
			go func() {
				defer close(done)
				res, b := e.post("/v1/responses", body(input, tc.stream), first)
				firstObj = read(res, b, tc.stream)
			}()
			if !tc.running {
				<-done
			} else {
				synctest.Wait() // the first is waiting on its upstream's next token
			}
			res, b := e.post("/v1/responses", body(input, !tc.stream), tc.hdr)
			second := read(res, b, !tc.stream)
			<-done
			want := map[bool]string{false: "replayed", true: "joined"}[tc.running]
			if second["id"] != firstObj["id"] || outputOf(second) != outputOf(firstObj) || outputOf(second) == "" ||
				res.Header.Get("X-Oncegate-Dedup") != want {
				t.Fatalf("%s: %v %q (%s), the turn is %v %q", tc.name, second["id"], outputOf(second), res.Header.Get("X-Oncegate-Dedup"),
					firstObj["id"], outputOf(firstObj))
			}
			if n := e.primaryCalls() - calls; n != 1 {
				t.Fatalf("%s: %d upstream generations for one turn", tc.name, n)
			}
		}
	})
}

// A turn a gateway of the previous version stored — under the
// fingerprint of its whole body, stream flag included — is still the same
// turn to a retry of it after an upgrade: under its key it replays (not
// 422), and keyless, still running, it is joined (not run twice).
func TestTurnsStoredBeforeStreamLeftTheDigestAreStillFound(t *testing.T) {
	t.Parallel()
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		_, b := e.post("/v1/responses", `{"model":"chat","input":"start"}`, nil)
		var root struct{ ID string }
		_ = json.Unmarshal(b, &root)
		body := `{"model":"chat","stream":false,"input":"next","previous_response_id":"` + root.ID + `"}`
		res, b := e.post("/v1/responses", body, map[string]string{"Idempotency-Key": "now"})
		var first struct{ ID string }
		if res.StatusCode != 200 || json.Unmarshal(b, &first) != nil {
			t.Fatalf("turn: %d %s", res.StatusCode, b)
		}
		// The same turn as the previous version stored it.
		canon, _ := identity.Canonicalize([]byte(body))
		op := provider.Responses.Operation()
		legacy := identity.Fingerprint(e.gw.secret, "acme", op, identity.SHA256Hex(canon))
		old, err := e.gw.ledger.Turn(ctx, "acme", first.ID)
		if err != nil {
			t.Fatal(err)
		}
		old.ResponseID, old.KeyDigest, old.Fingerprint = "resp_before_the_upgrade", identity.KeyDigest("acme", op, "old"), legacy
		if _, created, err := e.gw.ledger.BeginTurn(ctx, old); err != nil || !created {
			t.Fatalf("store the old turn: %v %v", created, err)
		}
		calls := e.primaryCalls()
		res, b = e.post("/v1/responses", body, map[string]string{"Idempotency-Key": "old"})
		if res.StatusCode != 200 || res.Header.Get("X-Oncegate-Dedup") != "replayed" || e.primaryCalls() != calls {
			t.Fatalf("its key after the upgrade: %d %s", res.StatusCode, b)
		}
		keyless := *old
		keyless.ResponseID, keyless.KeyDigest, keyless.State, keyless.Response = "resp_keyless_before", "", ledger.TurnPending, nil
		keyless.RequestID = "01a23598-0000-7000-8000-000000000001"
		if _, created, err := e.gw.ledger.BeginTurn(ctx, &keyless); err != nil || !created {
			t.Fatalf("store the old keyless turn: %v %v", created, err)
		}
		calls = e.primaryCalls()
		res, b = e.post("/v1/responses", body, nil)
		if res.StatusCode != 200 || !strings.Contains(string(b), keyless.ResponseID) || e.primaryCalls() != calls+1 {
			t.Fatalf("a keyless retry of a turn in flight before the upgrade: %d %s (%d calls)", res.StatusCode, b, e.primaryCalls()-calls)
		}
	})
}

// A turn that ended unknown on a stateful route is never tried again
// while its provider cannot be asked whether it committed it: a blind try
// would add a second answer to the provider's conversation, and the first
// try's commit would stay there unaccounted for. Once the provider answers
// the lookup, the committed answer is adopted: one generation, one turn.
func TestAnUnknownTurnIsNeverRetriedBlind(t *testing.T) {
	t.Parallel()
	var lookupsDown atomic.Bool
	front := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if lookupsDown.Load() && !(r.Method == http.MethodPost && r.URL.Path == "/v1/responses") {
				http.Error(w, `{"error":{"message":"lookups are down","type":"server_error"}}`, http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	inBubble(t, envOptions{mock: mock.Config{Tokens: 5}, fallbackFront: front}, func(t *testing.T, e *env) {
		_, b := e.post("/v1/responses", `{"model":"convo","input":"first"}`, nil)
		var root struct{ ID string }
		if err := json.Unmarshal(b, &root); err != nil || root.ID == "" {
			t.Fatalf("the first turn: %s", b)
		}
		// The second turn is committed by the provider, whose reply never
		// comes, and the lookup that would tell fails.
		lookupsDown.Store(true)
		e.fallback.SetScript(rules(always(mock.Fault{Type: mock.FaultCommitThenHang})))
		body := `{"model":"convo","input":"second","previous_response_id":"` + root.ID + `"}`
		key := map[string]string{"Idempotency-Key": "unknown-2"}
		if res, b := e.post("/v1/responses", body, key); res.StatusCode != 502 || errCodeOf(b) != api.CodeOutcomeUnknown {
			t.Fatalf("the lost reply: %d %s", res.StatusCode, b)
		}
		if calls := e.fallback.Stats().Requests; calls != 2 {
			t.Fatalf("%d generation calls after the lost reply; want 2", calls)
		}
		e.fallback.SetScript(mock.Script{})
		res, b := e.post("/v1/responses", body, key)
		if res.StatusCode != 502 || errCodeOf(b) != api.CodeOutcomeUnknown || !strings.Contains(string(b), "could not be asked") {
			t.Fatalf("the turn again while the provider cannot be asked: %d %s", res.StatusCode, b)
		}
		if calls := e.fallback.Stats().Requests; calls != 2 {
			t.Fatalf("the turn was sent again blind: %d generation calls, want 2", calls)
		}
		lookupsDown.Store(false)
		res, b = e.post("/v1/responses", body, key)
		if res.StatusCode != 200 {
			t.Fatalf("the turn once the provider can be asked: %d %s", res.StatusCode, b)
		}
		var second struct{ ID string }
		_ = json.Unmarshal(b, &second)
		if calls := e.fallback.Stats().Requests; calls != 2 {
			t.Fatalf("%d generation calls: the committed answer must be adopted, not generated again", calls)
		}
		turns, _ := e.gw.ledger.ConversationTurns(context.Background(), "acme", root.ID)
		items, err := conversation.HistoryItems(ledger.Chain(turns, second.ID))
		if err != nil {
			t.Fatal(err)
		}
		stored := e.fallback.Conversation(conversation.ReadUpstream(turns[len(turns)-1].Upstream).Conversation)
		if len(stored) != 4 || len(items) != 4 {
			t.Fatalf("the provider holds %d items, the gateway %d (want 4: two turns)", len(stored), len(items))
		}
	})
}
