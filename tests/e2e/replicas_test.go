package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"
	goredis "github.com/redis/go-redis/v9"

	rediscoord "github.com/oncegate/oncegate/internal/coord/redis"
	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/receipt"
)

// Three replicas behave as one gateway: 300 logical requests, each sent
// to all three at once — JSON and streams, keyed and keyless, on the
// OpenAI and the Anthropic API — make exactly 300 upstream generations,
// and every copy of an answer is the same, byte for byte. A finished
// keyed request asked again on another replica is replayed byte for byte.
func TestThreeReplicasMakeOneGenerationPerLogicalRequest(t *testing.T) {
	// The first token takes long enough that the three copies, sent
	// together, always meet in flight (a keyless copy arriving after the
	// answer would rightly be a new request).
	f := newFleet(t, 3, mock.Config{TTFT: 1500 * time.Millisecond, TokenInterval: 2 * time.Millisecond, Tokens: 12}, "")
	const n, parallel = 300, 50
	type logical struct {
		key               string
		stream, anthropic bool
		body              string
		copies            [3]call
	}
	reqs := make([]*logical, n)
	for i := range reqs {
		l := &logical{stream: i%2 == 1, anthropic: i%4 >= 2}
		if i%8 < 4 {
			l.key = fmt.Sprintf("fleet-%d", i)
		}
		l.body = chatJSON("chat", fmt.Sprintf("Question %d for the fleet", i), l.stream, `,"max_tokens":100`)
		reqs[i] = l
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, l := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var copies sync.WaitGroup
			for r := range 3 {
				copies.Add(1)
				go func() {
					defer copies.Done()
					l.copies[r] = send(context.Background(), f.gws[r], apiKey, l.key, l.anthropic, l.body)
				}()
			}
			copies.Wait()
		}()
	}
	wg.Wait()

	ids := map[string]bool{}
	for i, l := range reqs {
		first := l.copies[0]
		id := first.header.Get("X-Oncegate-Request-Id")
		misses := 0
		for r, c := range l.copies {
			if c.err != nil || c.status != 200 {
				t.Fatalf("request %d, replica %d: %v", i, r, c)
			}
			if !bytes.Equal(c.body, first.body) || c.header.Get("X-Oncegate-Request-Id") != id {
				t.Fatalf("request %d: the copies differ:\n%s\n%s", i, first.body, c.body)
			}
			switch c.header.Get("X-Oncegate-Dedup") {
			case "miss":
				misses++
			case "joined", "replayed":
			default:
				t.Fatalf("request %d, replica %d: X-Oncegate-Dedup %q", i, r, c.header.Get("X-Oncegate-Dedup"))
			}
		}
		if misses != 1 {
			t.Fatalf("request %d: %d copies owned it, want 1", i, misses)
		}
		if l.stream && !bytes.Contains(first.body, []byte("data:")) {
			t.Fatalf("request %d: not a stream: %s", i, first.body)
		}
		ids[id] = true
	}
	st := f.primary.Stats()
	if len(ids) != n || st.Requests != n || st.Generations != n || len(st.ByRequestID) != n {
		t.Fatalf("%d logical requests, %d request ids: the provider saw %d requests, %d generations, %d request ids (want %d each)",
			n, len(ids), st.Requests, st.Generations, len(st.ByRequestID), n)
	}
	for id := range ids {
		if st.ByRequestID[id].Requests != 1 {
			t.Fatalf("request %s reached the provider %d times", id, st.ByRequestID[id].Requests)
		}
	}
	// Keyed and finished: asked again on another replica, replayed.
	for i, l := range reqs {
		if l.key == "" || i%16 > 8 {
			continue
		}
		again := send(context.Background(), f.gws[(i+1)%3], apiKey, l.key, l.anthropic, l.body)
		if again.status != 200 || again.header.Get("X-Oncegate-Dedup") != "replayed" || !bytes.Equal(again.body, l.copies[0].body) {
			t.Fatalf("request %d asked again: %v (want a byte-for-byte replay)", i, again)
		}
	}
	if st := f.primary.Stats(); st.Requests != n {
		t.Fatalf("the replays reached the provider: %d requests", st.Requests)
	}
	// Every receipt counts its joined copies, on whichever replica asks.
	r, status := f.gws[2].receipt(t, reqs[0].copies[0].header.Get("X-Oncegate-Request-Id"))
	if status != 200 || r.Dedup.Joined+r.Dedup.Replayed < 2 {
		t.Fatalf("receipt of request 0 (%d): dedup %+v", status, r.Dedup)
	}
}

// SIGKILL the replica that owns a stream while clients on the two others
// read it: each of them ends with a clear in-band terminal, saying how
// much it was shown, about a second and a half after the kill — not when
// the dead owner's lease lapses (8 s here); nobody re-dispatches; the
// receipt shows the attempt indeterminate, with the output and the joins
// the other replicas saw; and the key answers 502 outcome_unknown.
func TestKillingTheOwnerOfAStreamEndsItsJoinersClearly(t *testing.T) {
	const lease = 8 * time.Second
	f := newFleetWith(t, 3, mock.Config{TTFT: 50 * time.Millisecond, TokenInterval: 50 * time.Millisecond, Tokens: 400}, "",
		func(f *fleet) { f.lease = "{ttl: 8s, renew: 2s}" })
	body := chatJSON("chat", "A long story, please", true, "")
	type reader struct {
		got  chan string // the first chunk
		done chan call
	}
	read := func(g *gateway) reader {
		r := reader{got: make(chan string, 1), done: make(chan call, 1)}
		go func() {
			r.done <- stream(g, "killed-stream", body, r.got)
		}()
		return r
	}
	owner := read(f.gws[0])
	select {
	case <-owner.got:
	case <-time.After(20 * time.Second):
		t.Fatal("the owner's stream never started")
	}
	joiners := []reader{read(f.gws[1]), read(f.gws[2])}
	for i, j := range joiners {
		select {
		case <-j.got:
		case c := <-j.done:
			t.Fatalf("joiner %d ended before the kill: %v", i, c)
		case <-time.After(20 * time.Second):
			t.Fatalf("joiner %d never got output", i)
		}
	}
	killed := time.Now()
	f.gws[0].kill(t)
	most := int64(0)
	for i, j := range joiners {
		c := <-j.done
		took := time.Since(killed)
		if c.header.Get("X-Oncegate-Dedup") != "joined" || !bytes.Contains(c.body, []byte(`"code":"stream_interrupted"`)) ||
			bytes.Contains(c.body, []byte("[DONE]")) {
			t.Fatalf("joiner %d: want a joined stream ending in band with stream_interrupted and no [DONE]; got %v", i, c)
		}
		if took > lease/2 {
			t.Fatalf("joiner %d ended %v after the kill: it waited for the dead owner's lease (%v)", i, took, lease)
		}
		shown := int64(bytes.Count(c.body, []byte(`"content":"`)) - bytes.Count(c.body, []byte(`"content":""`)))
		if !bytes.Contains(c.body, []byte(fmt.Sprintf(`"emitted_tokens":%d`, shown))) || shown == 0 {
			t.Fatalf("joiner %d was shown %d deltas; its in-band error says otherwise: %s", i, shown, c.body)
		}
		most = max(most, shown)
		t.Logf("joiner %d ended %v after the kill, shown %d deltas", i, took.Round(time.Millisecond), shown)
	}
	id := ""
	for k, c := range f.primary.Stats().ByIdempotencyKey {
		id = strings.TrimPrefix(k, "og-")
		if c.Requests != 1 {
			t.Fatalf("the provider saw %d requests for it", c.Requests)
		}
	}
	// The lease lapses; a surviving replica settles the request, with
	// what the joiners were shown.
	var r *receipt.Receipt
	within(t, lease+10*time.Second, "the receipt of the killed request", func() bool {
		var status int
		r, status = f.gws[1].receipt(t, id)
		return status == 200 && r.Terminal == "indeterminate" && len(r.Attempts) == 1 && r.Attempts[0].Kind == "unknown_provider_acceptance"
	})
	if a := r.Attempts[0]; !a.VisibleOutput || a.EmittedTokens < most || r.Dedup.Joined != 2 {
		t.Fatalf("the receipt does not say what the joiners saw: visible_output %v, emitted_tokens %d (joiners shown up to %d), dedup.joined %d",
			a.VisibleOutput, a.EmittedTokens, most, r.Dedup.Joined)
	}
	again := send(context.Background(), f.gws[2], apiKey, "killed-stream", false, body)
	if again.status != 502 || !bytes.Contains(again.body, []byte("outcome_unknown")) {
		t.Fatalf("the key after the kill: %v", again)
	}
	if n := f.primary.Stats().Requests; n != 1 {
		t.Fatalf("re-dispatched: the provider saw %d requests", n)
	}
}

// The same for a JSON answer: joiners on other replicas get 502
// outcome_unknown once the owner is seen gone, not when its lease lapses;
// so does a new arrival of the key on any replica, at once.
func TestKillingTheOwnerOfAnAnswerEndsItsJoinersClearly(t *testing.T) {
	const lease = 8 * time.Second
	f := newFleetWith(t, 3, mock.Config{TTFT: time.Minute, Tokens: 4}, "", func(f *fleet) { f.lease = "{ttl: 8s, renew: 2s}" })
	body := chatJSON("chat", "A slow answer, please", false, "")
	done := make(chan call, 3)
	go func() { done <- send(context.Background(), f.gws[0], apiKey, "killed-answer", false, body) }()
	within(t, 20*time.Second, "the attempt reaching the provider", func() bool { return f.primary.Stats().Requests == 1 })
	for _, g := range f.gws[1:] {
		go func() { done <- send(context.Background(), g, apiKey, "killed-answer", false, body) }()
	}
	time.Sleep(300 * time.Millisecond) // let the joiners join (a late one gets the same answer from the store)
	killed := time.Now()
	f.gws[0].kill(t)
	<-done // the owner's own client: its connection died with the process
	for range 2 {
		c := <-done
		if c.status != 502 || !bytes.Contains(c.body, []byte("outcome_unknown")) || c.header.Get("x-should-retry") != "false" {
			t.Fatalf("a joiner: %v", c)
		}
		if d := c.header.Get("X-Oncegate-Dedup"); d != "joined" {
			t.Fatalf("a joiner is told X-Oncegate-Dedup: %q; it joined the request whose owner died", d)
		}
		if took := time.Since(killed); took > lease/2 {
			t.Fatalf("a joiner answered %v after the kill: it waited for the dead owner's lease (%v)", took, lease)
		}
	}
	for i, g := range f.gws[1:] {
		c := send(context.Background(), g, apiKey, "killed-answer", false, body)
		if c.status != 502 || !bytes.Contains(c.body, []byte("outcome_unknown")) || time.Since(killed) > lease/2 {
			t.Fatalf("the key on replica %d, %v after the kill: %v", i+1, time.Since(killed), c)
		}
	}
	if n := f.primary.Stats().Requests; n != 1 {
		t.Fatalf("re-dispatched: the provider saw %d requests", n)
	}
}

// stream posts a keyed streaming request and reads it to the end; the
// first chunk's text goes to got.
func stream(g *gateway, key, body string, got chan<- string) call {
	req, _ := newRequest(g.url+"/v1/chat/completions", body)
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	res, err := httpClient.Do(req)
	if err != nil {
		return call{err: err}
	}
	defer res.Body.Close()
	var all bytes.Buffer
	buf := make([]byte, 4096)
	sent := false
	for {
		n, err := res.Body.Read(buf)
		all.Write(buf[:n])
		if !sent && bytes.Contains(all.Bytes(), []byte("content")) {
			got <- all.String()
			sent = true
		}
		if err != nil {
			break
		}
	}
	return call{status: res.StatusCode, header: res.Header, body: all.Bytes(), elapsed: time.Since(start)}
}

// A breaker opened by failures one replica saw is open on the others: a
// request there skips the failing route without trying it.
func TestABreakerOpensOnEveryReplica(t *testing.T) {
	f := newFleet(t, 3, mock.Config{Tokens: 4}, `
breaker: {failure_ratio: 0.5, min_requests: 4, window: 30s, open_for: 5m, half_open_probes: 1}
`)
	f.primary.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	const open = `oncegate_breaker_state{route="primary"}`
	for i := 0; f.gws[0].metric(t, open) != 2; i++ {
		if i == 20 {
			t.Fatalf("the breaker did not open on replica 0 after %d failing requests", i)
		}
		c := send(context.Background(), f.gws[0], apiKey, "", false, chatJSON("chat-fb", fmt.Sprintf("breaker %d", i), false, ""))
		if c.status != 200 || c.header.Get("X-Oncegate-Route") != "fallback" {
			t.Fatalf("request %d: %v (the fallback is healthy)", i, c)
		}
	}
	for r := 1; r < 3; r++ {
		within(t, 2*time.Second, fmt.Sprintf("the breaker open on replica %d", r), func() bool { return f.gws[r].metric(t, open) == 2 })
	}
	before := f.primary.Stats().Requests
	for r := 1; r < 3; r++ {
		c := send(context.Background(), f.gws[r], apiKey, "", false, chatJSON("chat-fb", fmt.Sprintf("after %d", r), false, ""))
		if c.status != 200 || c.header.Get("X-Oncegate-Route") != "fallback" || c.header.Get("X-Oncegate-Attempts") != "1" {
			t.Fatalf("replica %d: %v", r, c)
		}
	}
	if n := f.primary.Stats().Requests; n != before {
		t.Fatalf("the open route was tried %d times on the other replicas", n-before)
	}
}

// An outage seen by three replicas stays within the one fleet retry
// budget: upstream calls ≤ (1 + ratio) × requests + min_per_second × window.
func TestAnOutageAcrossReplicasStaysWithinTheFleetRetryBudget(t *testing.T) {
	f := newFleet(t, 3, mock.Config{Tokens: 4}, `
breaker: {min_requests: 1000000}
retry_budget: {ratio: 0.1, min_per_second: 1, window: 60s}
`)
	f.primary.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 503}}}})
	const n, parallel = 300, 24
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	codes := map[string]int{}
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c := send(context.Background(), f.gws[i%3], apiKey, "", false, chatJSON("chat", fmt.Sprintf("outage %d", i), false, ""))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.status == 503 && bytes.Contains(c.body, []byte("retry_budget_exhausted")):
				codes["retry_budget_exhausted"]++
			case c.status == 503 && bytes.Contains(c.body, []byte("upstream_unavailable")):
				codes["upstream_unavailable"]++
			default:
				t.Errorf("request %d: %v", i, c)
			}
		}()
	}
	wg.Wait()
	calls := f.primary.Stats().Requests
	if bound := int64(1.1*n + 60); calls > bound || calls < n {
		t.Fatalf("%d upstream calls for %d requests on 3 replicas, want %d..%d (%v)", calls, n, n, bound, codes)
	}
	if codes["retry_budget_exhausted"] < n-int(calls-n) {
		t.Fatalf("only %d requests stopped by the budget (%v), %d calls", codes["retry_budget_exhausted"], codes, calls)
	}
}

// A tenant's request rate and daily ceiling hold across replicas, across
// a restart of all of them, and across Redis losing everything (the day's
// spend is seeded again from the store).
func TestTenantLimitsHoldAcrossReplicasAndRestarts(t *testing.T) {
	f := newFleet(t, 3, mock.Config{Tokens: 4}, "")
	admitted := 0
	for i := range 6 {
		c := send(context.Background(), f.gws[i%3], keyCapped, "", false, chatJSON("chat", fmt.Sprintf("rate %d", i), false, ""))
		switch {
		case c.status == 200:
			admitted++
		case c.status == 429 && bytes.Contains(c.body, []byte("tenant_rate_limited")) && c.header.Get("Retry-After") != "":
		default:
			t.Fatalf("request %d: %v", i, c)
		}
	}
	if admitted != 2 {
		t.Fatalf("%d of 6 admitted across the replicas, want the 2 a minute allows", admitted)
	}
	// Spend until refused with nothing in flight: a refusal while an
	// answered request's settled cost is on its way (its reservation, the
	// worst case, still counting) can leave room once it lands.
	refusals := 0
	for i := 0; refusals < 2; i++ {
		if i == 80 {
			t.Fatal("the ceiling never refused")
		}
		c := send(context.Background(), f.gws[i%3], keyThrifty, "", false, chatJSON("chat", fmt.Sprintf("spend %d", i), false, `,"max_tokens":16`))
		switch {
		case c.status == 200:
			refusals = 0
		case c.status == 429 && bytes.Contains(c.body, []byte("tenant_budget_exceeded")):
			refusals++
			time.Sleep(200 * time.Millisecond)
		case c.status == 429 && bytes.Contains(c.body, []byte("tenant_budget_pending")):
			// The last answer's reservation still holds what its settled
			// cost will free: come back, as the refusal says.
			time.Sleep(200 * time.Millisecond)
		default:
			t.Fatalf("spend %d: %v", i, c)
		}
	}
	calls := f.primary.Stats().Requests
	for _, g := range f.gws {
		g.kill(t)
	}
	f.gws = []*gateway{f.start(), f.start(), f.start()}
	checkRefused := func(when string, rate bool) {
		t.Helper()
		for r, g := range f.gws {
			if c := send(context.Background(), g, keyCapped, "", false, chatJSON("chat", when+" rate", false, "")); rate && c.status != 429 {
				t.Fatalf("%s, replica %d: the rate admitted %v", when, r, c)
			}
			if c := send(context.Background(), g, keyThrifty, "", false, chatJSON("chat", when+" spend", false, `,"max_tokens":16`)); c.status != 429 ||
				!bytes.Contains(c.body, []byte("tenant_budget_exceeded")) {
				t.Fatalf("%s, replica %d: the ceiling admitted %v", when, r, c)
			}
		}
	}
	checkRefused("after a restart of every replica", true)
	if n := f.primary.Stats().Requests; n != calls {
		t.Fatalf("the provider saw %d calls after the limits were reached", n-calls)
	}
	// The rate is Redis's alone (a minute's tokens); the spend is the
	// store's too.
	flushPrefix(t, f.coord)
	checkRefused("after Redis lost everything", false)
}

// flushPrefix deletes every key a coordination URL's key_prefix names, as
// a Redis restarted empty would have lost them.
func flushPrefix(t *testing.T, coordination string) {
	t.Helper()
	u, prefix, err := rediscoord.SplitPrefix(coordination)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := goredis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}

// The official SDKs, at their default settings, read a stream owned by
// another replica as they read any stream: the OpenAI SDK's accumulator
// and the Anthropic SDK's message accumulate the same text as the owner's
// client got, from joins on the two other replicas.
func TestOfficialSDKsReadAStreamOwnedByAnotherReplica(t *testing.T) {
	f := newFleet(t, 3, mock.Config{TTFT: 300 * time.Millisecond, TokenInterval: 5 * time.Millisecond, Tokens: 40}, "")
	const prompt = "Tell the fleet a story"
	ctx := context.Background()
	// The owner: the OpenAI SDK on replica 0.
	owner := make(chan string, 1)
	go func() {
		c := openai.NewClient(oaopt.WithBaseURL(f.gws[0].url+"/v1"), oaopt.WithAPIKey(apiKey), oaopt.WithHeader("Idempotency-Key", "sdk-story"))
		st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if st.Err() != nil || len(acc.Choices) == 0 {
			owner <- "error: " + fmt.Sprint(st.Err())
			return
		}
		owner <- acc.Choices[0].Message.Content
	}()
	within(t, 10*time.Second, "the owner's attempt", func() bool { return f.primary.Stats().Requests == 1 })
	// A joiner with the OpenAI SDK on replica 1.
	var h http.Header
	c := openai.NewClient(oaopt.WithBaseURL(f.gws[1].url+"/v1"), oaopt.WithAPIKey(apiKey), oaopt.WithHeader("Idempotency-Key", "sdk-story"),
		oaopt.WithMiddleware(func(r *http.Request, next oaopt.MiddlewareNext) (*http.Response, error) {
			res, err := next(r)
			if res != nil {
				h = res.Header.Clone()
			}
			return res, err
		}))
	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Fatalf("the SDK accumulator rejected a relayed chunk: %+v", st.Current())
		}
	}
	if err := st.Err(); err != nil || len(acc.Choices) == 0 {
		t.Fatalf("the joiner's stream: %v", err)
	}
	got, want := acc.Choices[0].Message.Content, <-owner
	if got != want || h.Get("X-Oncegate-Dedup") != "joined" {
		t.Fatalf("the joiner on another replica read %q (%s), the owner's client %q", got, h.Get("X-Oncegate-Dedup"), want)
	}
	// The same request as an Anthropic SDK user on replica 2, while
	// another is in flight: it joins that one and reads its text.
	done := make(chan string, 1)
	go func() {
		c := anthropic.NewClient(anopt.WithBaseURL(f.gws[0].url), anopt.WithAPIKey(apiKey), anopt.WithHeader("Idempotency-Key", "sdk-story-anthropic"))
		st := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 200,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
		var msg anthropic.Message
		for st.Next() {
			_ = msg.Accumulate(st.Current())
		}
		if st.Err() != nil || len(msg.Content) == 0 {
			done <- "error: " + fmt.Sprint(st.Err())
			return
		}
		done <- msg.Content[0].Text
	}()
	within(t, 10*time.Second, "the Anthropic owner's attempt", func() bool { return f.primary.Stats().Requests == 2 })
	ac := anthropic.NewClient(anopt.WithBaseURL(f.gws[2].url), anopt.WithAPIKey(apiKey), anopt.WithHeader("Idempotency-Key", "sdk-story-anthropic"))
	ast := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 200,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
	var msg anthropic.Message
	for ast.Next() {
		if err := msg.Accumulate(ast.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := ast.Err(); err != nil || len(msg.Content) != 1 {
		t.Fatalf("the Anthropic joiner: %v %+v", err, msg.Content)
	}
	if want := <-done; msg.Content[0].Text != want || want == "" {
		t.Fatalf("the Anthropic joiner read %q, its owner's client %q", msg.Content[0].Text, want)
	}
	if n := f.primary.Stats().Requests; n != 2 {
		t.Fatalf("the provider saw %d requests for 2 logical requests", n)
	}
}
