package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oaopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The kinds of client a logical request comes from.
const (
	kindOpenAIJSON   = "openai-sdk json"
	kindOpenAIStream = "openai-sdk stream"
	kindAnthropic    = "anthropic-sdk json"
	kindAnthropicSSE = "anthropic-sdk stream"
	kindKeyedRePOST  = "raw keyed json, re-POSTed"
	kindKeyedStream  = "raw keyed stream"
	kindConversation = "openai-sdk conversation"
	kindStateful     = "openai-sdk stateful conversation"
)

var kinds = []string{kindOpenAIJSON, kindOpenAIStream, kindAnthropic, kindAnthropicSSE, kindKeyedRePOST, kindKeyedStream, kindConversation, kindStateful}

// profile is who sends a logical request and what bounds it: a tenant
// (by its key), a model, the client's own deadline and output cap.
type profile struct {
	name      string
	apiKey    string
	model     string
	timeoutMS int // X-Oncegate-Timeout-Ms; 0: none
	maxTokens int // the client's output cap; 0: none
}

// The profiles a chat request is sent under, and how often (in
// hundredths). Conversations are always plain.
var (
	plain    = profile{name: "plain", apiKey: apiKey, model: "chat"}
	profiles = []struct {
		p      profile
		weight int
	}{
		{plain, 34},
		// The other clouds: Azure OpenAI, Bedrock and Vertex AI in a
		// weighted tier, then Gemini.
		{profile{name: "clouds", apiKey: apiKey, model: "chat-clouds"}, 16},
		// A weighted tier of two routes on two protocols, then the
		// private route (docs/routing.md).
		{profile{name: "spread", apiKey: apiKey, model: "chat-spread"}, 14},
		// A client deadline of 50 ms to 1.05 s (drawn per request).
		{profile{name: "deadline", apiKey: apiKey, model: "chat", timeoutMS: -1}, 12},
		// A per-request cost cap that binds once an attempt has cost
		// something (chat-metered's max_cost_usd).
		{profile{name: "metered", apiKey: apiKey, model: "chat-metered", maxTokens: 30}, 12},
		// A tenant that may use private routes only.
		{profile{name: "private", apiKey: privateKey, model: "chat"}, 6},
		// A tenant whose daily cost ceiling runs out during the run.
		{profile{name: "capped", apiKey: cappedKey, model: "chat-metered", maxTokens: 30}, 6},
	}
)

// drawProfile picks a chat request's profile from u in [0, 100) and v
// (the deadline's draw) in [0, 1).
func drawProfile(u int, v float64) profile {
	for _, w := range profiles {
		if u < w.weight {
			p := w.p
			if p.timeoutMS < 0 {
				p.timeoutMS = 50 + int(v*1000)
			}
			return p
		}
		u -= w.weight
	}
	return plain
}

// headers are the profile's request headers besides auth.
func (p profile) headers() map[string]string {
	h := map[string]string{}
	if p.timeoutMS > 0 {
		h["X-Oncegate-Timeout-Ms"] = strconv.Itoa(p.timeoutMS)
	}
	return h
}

// conversationTurns is how many turns a conversation client takes.
const conversationTurns = 3

// turn is one answered turn of a conversation.
type turn struct {
	input, text, responseID, requestID string
}

// outcome is what one user action's client saw.
type outcome struct {
	kind, prompt, key string
	prof              profile
	stream            bool
	// ok: the client got a whole successful answer, whose text is text;
	// body is the raw JSON of a keyed JSON answer.
	ok        bool
	text      string
	body      []byte
	requestID string
	err       string
	// shown is the most visible deltas (text pieces) one of its streams
	// delivered to the client, whole or cut: what it was shown, which its
	// receipt must bill at least.
	shown int64
	// turns are a conversation's answered turns, in order; pending is the
	// input of the turn it was still trying when it stopped.
	turns   []turn
	pending string
	// finishedLate: the pending turn was answered when tried again after
	// the run.
	finishedLate bool
}

// do sends logical request i as its kind's client would, under prof, to
// the gateway at base; a stateful conversation asks pick for a gateway
// at each try of a turn.
func do(ctx context.Context, base string, pick func() string, kind string, prof profile, i int) outcome {
	o := outcome{kind: kind, prof: prof, prompt: fmt.Sprintf("Chaos request %d: tell me something.", i)}
	var hdr http.Header
	// The headers of the last response the client got: an SDK that
	// retried a 503 reads its answer from the last.
	keep := func(r *http.Response) {
		if r != nil && r.Header != nil {
			hdr = r.Header.Clone()
		}
	}
	oaMiddleware := oaopt.WithMiddleware(func(r *http.Request, next oaopt.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		keep(res)
		return res, err
	})
	anMiddleware := anopt.WithMiddleware(func(r *http.Request, next anopt.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		keep(res)
		return res, err
	})
	oaOpts := []oaopt.RequestOption{oaopt.WithBaseURL(base + "/v1"), oaopt.WithAPIKey(prof.apiKey), oaMiddleware}
	anOpts := []anopt.RequestOption{anopt.WithBaseURL(base), anopt.WithAPIKey(prof.apiKey), anMiddleware}
	for k, v := range prof.headers() {
		oaOpts = append(oaOpts, oaopt.WithHeader(k, v))
		anOpts = append(anOpts, anopt.WithHeader(k, v))
	}
	switch kind {
	case kindOpenAIJSON, kindOpenAIStream:
		c := openai.NewClient(oaOpts...)
		p := openai.ChatCompletionNewParams{Model: prof.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(o.prompt)}}
		if prof.maxTokens > 0 {
			p.MaxCompletionTokens = openai.Int(int64(prof.maxTokens))
		}
		if kind == kindOpenAIJSON {
			res, err := c.Chat.Completions.New(ctx, p)
			if err != nil {
				o.err = err.Error()
				break
			}
			if len(res.Choices) == 1 {
				o.ok, o.text = true, res.Choices[0].Message.Content
			}
			break
		}
		o.stream = true
		st := c.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
			if ch := st.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				o.shown++
			}
		}
		if err := st.Err(); err != nil {
			o.err = err.Error()
			break
		}
		if len(acc.Choices) == 1 && acc.Choices[0].FinishReason == "stop" {
			o.ok, o.text = true, acc.Choices[0].Message.Content
		}
	case kindAnthropic, kindAnthropicSSE:
		c := anthropic.NewClient(anOpts...)
		maxTokens := int64(1024)
		if prof.maxTokens > 0 {
			maxTokens = int64(prof.maxTokens)
		}
		p := anthropic.MessageNewParams{Model: anthropic.Model(prof.model), MaxTokens: maxTokens,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(o.prompt))}}
		if kind == kindAnthropic {
			res, err := c.Messages.New(ctx, p)
			if err != nil {
				o.err = err.Error()
				break
			}
			if len(res.Content) == 1 {
				o.ok, o.text = true, res.Content[0].Text
			}
			break
		}
		o.stream = true
		st := c.Messages.NewStreaming(ctx, p)
		var msg anthropic.Message
		for st.Next() {
			ev := st.Current()
			if err := msg.Accumulate(ev); err != nil {
				o.err = err.Error()
			}
			if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok && d.Delta.Text != "" {
				o.shown++
			}
		}
		if err := st.Err(); err != nil {
			o.err = err.Error()
			break
		}
		if o.err == "" && len(msg.Content) == 1 && msg.StopReason == "end_turn" {
			o.ok, o.text = true, msg.Content[0].Text
		}
	case kindConversation:
		// A conversation on /v1/responses: the first turn under a key,
		// the next ones continuing it (the SDK's own retries of those are
		// found by their body on their parent).
		prev := ""
		for k := 1; k <= conversationTurns; k++ {
			input := fmt.Sprintf("Chaos conversation %d, turn %d.", i, k)
			opts := []oaopt.RequestOption{oaopt.WithBaseURL(base + "/v1"), oaopt.WithAPIKey(prof.apiKey), oaMiddleware}
			if prev == "" {
				opts = append(opts, oaopt.WithHeader("Idempotency-Key", fmt.Sprintf("chaos-conversation-%d", i)))
			}
			c := openai.NewClient(opts...)
			p := responses.ResponseNewParams{Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
			if prev != "" {
				p.PreviousResponseID = openai.String(prev)
			}
			hdr = nil
			res, err := c.Responses.New(ctx, p)
			if err != nil {
				o.err = err.Error()
				break
			}
			t := turn{input: input, text: res.OutputText(), responseID: res.ID}
			if hdr != nil {
				t.requestID = hdr.Get("X-Oncegate-Request-Id")
			}
			o.turns = append(o.turns, t)
			prev = res.ID
		}
		o.ok = len(o.turns) == conversationTurns
	case kindStateful:
		o.stream = i%2 == 1
		statefulConversation(ctx, pick, prof, i, &o)
	case kindKeyedRePOST, kindKeyedStream:
		o.key = fmt.Sprintf("chaos-%d", i)
		o.stream = kind == kindKeyedStream
		// The client POSTs, and POSTs again as a user whose page
		// reloaded would: the second must be the first's answer.
		for range 2 {
			st, b, h, err := post(ctx, base, prof, o.key, "/v1/chat/completions", chatBody(o.prompt, o.stream, prof))
			if h.Get("X-Oncegate-Request-Id") != "" {
				keep(&http.Response{Header: h})
			}
			if o.stream && st == 200 {
				o.shown = max(o.shown, deltas(b)) // what it read, whole or cut
			}
			if err != nil {
				o.err = err.Error()
				continue
			}
			if st != 200 {
				o.err = fmt.Sprintf("status %d: %s", st, firstLine(b))
				continue
			}
			text, done := answerText(b, o.stream)
			if done {
				o.ok, o.text, o.body, o.err = true, text, b, ""
			}
		}
	}
	if hdr != nil {
		o.requestID = hdr.Get("X-Oncegate-Request-Id")
	}
	return o
}

// chatBody is a Chat Completions request for prompt under prof.
func chatBody(prompt string, stream bool, prof profile) []byte {
	m := map[string]any{"model": prof.model, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}}
	if prof.maxTokens > 0 {
		m["max_tokens"] = prof.maxTokens
	}
	b, _ := json.Marshal(m)
	return b
}

// post sends body to path under prof, with an Idempotency-Key unless key
// is "", and reads the whole answer.
func post(ctx context.Context, base string, prof profile, key, path string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+prof.apiKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for k, v := range prof.headers() {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header, err
}

// answerText is the text of a Chat Completions answer, JSON or SSE; done
// says the answer was whole (a stream ended with its finish reason and
// [DONE], not with an error).
func answerText(b []byte, stream bool) (string, bool) {
	if !stream {
		var r struct {
			Choices []struct {
				Message      struct{ Content string } `json:"message"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 {
			return "", false
		}
		return r.Choices[0].Message.Content, r.Choices[0].FinishReason == "stop"
	}
	var text strings.Builder
	finished, sawDone := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(data), &c) != nil || c.Error != nil {
			return text.String(), false
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil && *ch.FinishReason == "stop" {
				finished = true
			}
		}
	}
	return text.String(), finished && sawDone
}

// deltas counts the visible deltas (non-empty text pieces) of a Chat
// Completions stream, read whole or cut.
func deltas(b []byte) int64 {
	var n int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			n++
		}
	}
	return n
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
