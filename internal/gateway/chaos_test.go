package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oopt2 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/conversation"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/receipt"
)

// The conversation chaos run: 50 conversations of 10 turns each on a
// stateful route whose provider, at random, commits a turn and then loses
// the reply (a read timeout, a reset mid-stream, a 502, a double commit)
// or fails before committing. Clients are the official SDK at its default
// retries (some with a short timeout, so the SDK retries on its own),
// streaming or not, and raw same-key re-POSTs, concurrent and after the
// fact. At the end the provider's own records and the gateway's ledger
// must agree exactly.
func TestConversationChaos(t *testing.T) {
	t.Parallel()
	const conversations, turnsEach = 50, 10
	// The breaker and the retry budget are not what this test is about:
	// on a loaded machine (the race detector, the package's other tests)
	// healthy answers also pass the 400 ms first-byte timeout, and an
	// open breaker would refuse whole conversations before they start.
	e := newEnvOpts(t, envOptions{mock: mock.Config{Tokens: 6}, yaml: `
breaker: {failure_ratio: 1, min_requests: 1000000, window: 10s, open_for: 1s, half_open_probes: 3}
retry_budget: {ratio: 10, min_per_second: 1000, window: 10s}
`})
	fault := func(pct int, f mock.Fault) mock.Rule { return mock.Rule{Percent: pct, Fault: f} }
	e.fallback.SetScript(mock.Script{Rules: []mock.Rule{
		fault(8, mock.Fault{Type: mock.FaultCommitThenHang}),
		fault(8, mock.Fault{Type: mock.FaultCommitThenReset, After: 2}),
		fault(6, mock.Fault{Type: mock.FaultCommitThen502}),
		fault(4, mock.Fault{Type: mock.FaultCommitTwiceThen502}),
		fault(5, mock.Fault{Type: mock.FaultHang}),
		fault(5, mock.Fault{Type: mock.FaultStatus, Status: 503}),
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	roots := make([]string, conversations)
	advanced := make([]int, conversations)
	gaveUp := make([]bool, conversations)
	for i := range conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			d := &chaosDriver{t: t, e: e, rng: rng, conv: i}
			if i%3 == 0 {
				// A short timeout: the SDK gives up on slow turns and
				// retries them on its own.
				d.sdkOpts = []oopt2.RequestOption{oopt2.WithRequestTimeout(700 * time.Millisecond)}
			}
			prev := ""
			for turn := range turnsEach {
				id := d.turn(ctx, prev, fmt.Sprintf("conversation %d, turn %d", i, turn))
				if id == "" {
					break // the conversation stops here, consistent
				}
				if prev == "" {
					roots[i] = id
				}
				prev = id
				advanced[i]++
			}
			gaveUp[i] = d.gaveUp
			if d.gaveUp {
				// The application comes back to the turn it got no
				// answer to, as the soak's does: an unknown turn is
				// reconciled, never left so.
				if id := d.settle(); id != "" {
					advanced[i]++
					if d.last.prev == "" {
						roots[i] = id // the first turn, answered at last
					}
				}
			}
		}()
	}
	wg.Wait()

	// A client reading each conversation's latest answer has the gateway
	// read the provider's conversation once more, for commits that came
	// after a try was found absent. On a loaded machine a try the gateway
	// gave up on can reach the provider after that read (its handler runs
	// late): the client reads again, as an application would, until the
	// provider holds nothing the gateway does not account for — the
	// gateway must then have removed and recorded each late copy.
	tip := func(i int) *ledger.Turn {
		turns, _ := e.gw.ledger.ConversationTurns(ctx, "acme", roots[i])
		var tip *ledger.Turn
		for _, tr := range turns {
			if tr.State == ledger.TurnDone && (tip == nil || tr.Depth > tip.Depth) {
				tip = tr
			}
		}
		return tip
	}
	settled := func(i int) bool {
		turns, _ := e.gw.ledger.ConversationTurns(ctx, "acme", roots[i])
		t := tip(i)
		items, err := conversation.HistoryItems(ledger.Chain(turns, t.ResponseID))
		return err == nil && len(e.fallback.Conversation(conversation.ReadUpstream(t.Upstream).Conversation)) == len(items)
	}
	for round := 0; ; round++ {
		pending := 0
		for i, root := range roots {
			if root == "" {
				continue
			}
			if round > 0 && settled(i) {
				continue
			}
			pending++
			oc := e.openai(nil)
			if _, err := oc.Responses.Get(ctx, tip(i).ResponseID, responses.ResponseGetParams{}); err != nil {
				t.Fatalf("conversation %d: get its latest response: %v", i, err)
			}
		}
		if pending == 0 || round == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the provider's late handlers, not the gateway
	}
	store := e.gw.ledger
	total, orphans := 0, 0
	for i, root := range roots {
		if root == "" {
			// Every try of its first turn failed and the turn was given
			// up: legitimate on a loaded machine, where healthy answers
			// also pass the 400 ms first-byte timeout. What the provider
			// committed for it is in the count below all the same.
			if !gaveUp[i] {
				t.Fatalf("conversation %d never started, and was not given up", i)
			}
			t.Logf("conversation %d: its first turn was given up", i)
			continue
		}
		turns, err := store.ConversationTurns(ctx, "acme", root)
		if err != nil {
			t.Fatal(err)
		}
		live := map[string]string{}
		var last *ledger.Turn
		users, assistants := 0, 0
		for _, tr := range turns {
			switch tr.State {
			case ledger.TurnPending, ledger.TurnUnknown:
				t.Fatalf("conversation %d: turn %s is still %s", i, tr.ResponseID, tr.State)
			case ledger.TurnFailed:
				continue
			}
			// The driver says something new on a response only once the
			// turn before it was given up (failed): two answered
			// continuations of one response are one user action twice.
			if other, ok := live[tr.Parent]; ok {
				t.Fatalf("conversation %d: one turn answered twice: %s and %s both continue %q", i, other, tr.ResponseID, tr.Parent)
			}
			live[tr.Parent] = tr.ResponseID
			var in []map[string]any
			_ = json.Unmarshal(tr.Input, &in)
			users += len(in)
			out := 0
			var obj struct{ Output []any }
			_ = json.Unmarshal(tr.Response, &obj)
			out += len(obj.Output)
			assistants += out
			if last == nil || tr.Depth > last.Depth {
				last = tr
			}
		}
		// Every acknowledged turn is in the conversation once; a turn the
		// client gave up on may be there too (it was committed after the
		// client stopped waiting), and nothing else.
		unacknowledged := users - advanced[i]
		if users != assistants || unacknowledged < 0 || unacknowledged > 1 || unacknowledged == 1 && !gaveUp[i] {
			t.Fatalf("conversation %d: %d user turns, %d assistant turns, %d turns acknowledged: ratio %.3f",
				i, users, assistants, advanced[i], float64(assistants)/float64(users))
		}
		total += users
		// The provider's conversation is the gateway's, item for item.
		items, err := conversation.HistoryItems(ledger.Chain(turns, last.ResponseID))
		if err != nil {
			t.Fatal(err)
		}
		stored := e.fallback.Conversation(conversation.ReadUpstream(last.Upstream).Conversation)
		if len(stored) != len(items) {
			t.Fatalf("conversation %d: the provider holds %d items, the gateway %d", i, len(stored), len(items))
		}
		for j := range items {
			if mockItemText(stored[j]) != itemText(items[j]) {
				t.Fatalf("conversation %d item %d: provider %q, gateway %q", i, j, mockItemText(stored[j]), itemText(items[j]))
			}
		}
		os, err := store.Orphans(ctx, "acme", root)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range os {
			if o.Cost <= 0 || o.OutputTokens <= 0 {
				t.Fatalf("conversation %d: an orphan without its cost: %+v", i, o)
			}
		}
		orphans += len(os)
	}
	// Every response the provider committed is a turn the conversation
	// kept or an orphan it recorded.
	if stored := e.fallback.StoredResponses(); stored != total+orphans {
		t.Fatalf("the provider committed %d responses; the gateway kept %d turns and recorded %d orphans", stored, total, orphans)
	}
	// Every generation the provider saw is an attempt in a receipt.
	attempts, neverSent := 0, 0
	for after := ""; ; {
		page, err := store.Receipts(ctx, "acme", 500, after)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, b := range page {
			r, err := receipt.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Seal(); err != nil {
				t.Fatal(err)
			}
			if drifts := receipt.Verify(e.pol, r); len(drifts) != 0 {
				t.Fatalf("receipt %s does not verify: %v", r.RequestID, drifts)
			}
			attempts += len(r.Attempts)
			for _, a := range r.Attempts {
				if a.Error != nil && (strings.HasPrefix(a.Error.Message, "upstream connect") || strings.HasPrefix(a.Error.Message, "create the upstream conversation")) {
					neverSent++ // it failed before its request left: the provider never saw it
				}
			}
			after = r.RequestID
		}
	}
	if calls := e.fallback.Stats().Requests; calls != int64(attempts-neverSent) {
		t.Fatalf("the provider saw %d generation calls; the receipts hold %d attempts, %d of them never sent", calls, attempts, neverSent)
	}
	t.Logf("%d turns acknowledged, %d orphans recorded, %d attempts (%d never sent), %d stored responses, %d lookups",
		total, orphans, attempts, neverSent, e.fallback.StoredResponses(), e.fallback.Lookups())
}

// chaosDriver plays one conversation's client.
type chaosDriver struct {
	t       *testing.T
	e       *env
	rng     *rand.Rand
	conv    int
	sdkOpts []oopt2.RequestOption
	keys    int
	// gaveUp: a turn got no answer after every try; the last turn the
	// driver sent may still have been committed. last is that turn.
	gaveUp bool
	last   struct{ prev, text, key string }
}

// settle sends the turn the driver gave up on again, under its key, until
// the gateway says how it ended: its answer (the id), or that it was
// given up.
func (d *chaosDriver) settle() string {
	for range 20 {
		id, given := d.raw(d.last.prev, d.last.text, d.last.key, false)
		if id != "" || given {
			return id
		}
		time.Sleep(50 * time.Millisecond) // a test's client, not the gateway
	}
	d.t.Errorf("conversation %d: the turn given up never settled", d.conv)
	return ""
}

// turn says text after prev until a response acknowledges it, as a
// client would: the same request again after a failure, a new key once a
// turn was given up. It returns the response id, or "" if it gave up.
func (d *chaosDriver) turn(ctx context.Context, prev, text string) string {
	key := d.newKey()
	// One user action, one way of sending it: a client retries the turn
	// as it first sent it, under its key (a different body on the same
	// parent would be another user action: a branch).
	mode := d.rng.IntN(4)
	for range 8 {
		id, given := "", false
		switch mode {
		case 0, 1:
			id, given = d.sdk(ctx, prev, text, key, mode == 1)
		default:
			id, given = d.raw(prev, text, key, mode == 3)
		}
		if id != "" {
			return id
		}
		if given {
			key = d.newKey() // that turn is over: say it again, as a new turn
		}
	}
	d.gaveUp = true
	d.last.prev, d.last.text, d.last.key = prev, text, key
	return ""
}

func (d *chaosDriver) newKey() string {
	d.keys++
	return fmt.Sprintf("chaos-%d-%d", d.conv, d.keys)
}

// sdk sends the turn with the official SDK under the turn's key: the
// application tries a turn again, after the SDK's own retries gave up,
// minutes later if need be, and only the key makes that the same turn (a
// keyless one sent again past the replay windows is a new branch).
func (d *chaosDriver) sdk(ctx context.Context, prev, text, key string, stream bool) (string, bool) {
	opts := append(slices.Clone(d.sdkOpts), oopt2.WithHeader("Idempotency-Key", key))
	c := d.e.openai(nil, opts...)
	p := responses.ResponseNewParams{Model: "convo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
	if prev != "" {
		p.PreviousResponseID = openai.String(prev)
	}
	if !stream {
		res, err := c.Responses.New(ctx, p)
		if err != nil {
			return "", strings.Contains(err.Error(), "given up")
		}
		return res.ID, false
	}
	st := c.Responses.NewStreaming(ctx, p)
	id := ""
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			id = ev.Response.ID
		}
	}
	return id, false
}

// raw posts the turn with an Idempotency-Key: twice at once, or once and
// then again after the first answered.
func (d *chaosDriver) raw(prev, text, key string, concurrent bool) (string, bool) {
	body := map[string]any{"model": "convo", "input": text}
	if prev != "" {
		body["previous_response_id"] = prev
	}
	b, _ := json.Marshal(body)
	post := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", d.e.url+"/v1/responses", strings.NewReader(string(b)))
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("Idempotency-Key", key)
		res, err := d.e.client.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	type answer struct {
		status int
		m      map[string]any
	}
	var answers []answer
	if concurrent {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, m := post()
				mu.Lock()
				answers = append(answers, answer{st, m})
				mu.Unlock()
			}()
		}
		wg.Wait()
	} else {
		st, m := post()
		answers = append(answers, answer{st, m})
		if st == 200 {
			st2, m2 := post()
			answers = append(answers, answer{st2, m2})
		}
	}
	id, given := "", false
	for _, a := range answers {
		if a.status != 200 {
			given = given || strings.Contains(fmt.Sprint(a.m), "given up")
			continue
		}
		got, _ := a.m["id"].(string)
		if id != "" && got != id {
			d.t.Errorf("one key answered as two responses: %s and %s", id, got)
		}
		id = got
	}
	return id, given
}
