package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
)

var kinds = []string{kindOpenAIJSON, kindOpenAIStream, kindAnthropic, kindAnthropicSSE, kindKeyedRePOST, kindKeyedStream, kindConversation}

// conversationTurns is how many turns a conversation client takes.
const conversationTurns = 3

// turn is one answered turn of a conversation.
type turn struct {
	input, text, responseID, requestID string
}

// outcome is what one user action's client saw.
type outcome struct {
	kind, prompt, key string
	stream            bool
	// ok: the client got a whole successful answer, whose text is text;
	// body is the raw JSON of a keyed JSON answer.
	ok        bool
	text      string
	body      []byte
	requestID string
	err       string
	// turns are a conversation's answered turns, in order.
	turns []turn
}

// do sends logical request i as its kind's client would, to the gateway
// at base.
func do(ctx context.Context, base, apiKey, kind string, i int) outcome {
	o := outcome{kind: kind, prompt: fmt.Sprintf("Chaos request %d: tell me something.", i)}
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
	switch kind {
	case kindOpenAIJSON, kindOpenAIStream:
		c := openai.NewClient(oaopt.WithBaseURL(base+"/v1"), oaopt.WithAPIKey(apiKey), oaMiddleware)
		p := openai.ChatCompletionNewParams{Model: "chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(o.prompt)}}
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
		}
		if err := st.Err(); err != nil {
			o.err = err.Error()
			break
		}
		if len(acc.Choices) == 1 && acc.Choices[0].FinishReason == "stop" {
			o.ok, o.text = true, acc.Choices[0].Message.Content
		}
	case kindAnthropic, kindAnthropicSSE:
		c := anthropic.NewClient(anopt.WithBaseURL(base), anopt.WithAPIKey(apiKey), anMiddleware)
		p := anthropic.MessageNewParams{Model: "chat", MaxTokens: 1024,
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
			if err := msg.Accumulate(st.Current()); err != nil {
				o.err = err.Error()
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
			opts := []oaopt.RequestOption{oaopt.WithBaseURL(base + "/v1"), oaopt.WithAPIKey(apiKey), oaMiddleware}
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
	case kindKeyedRePOST, kindKeyedStream:
		o.key = fmt.Sprintf("chaos-%d", i)
		o.stream = kind == kindKeyedStream
		// The client POSTs, and POSTs again as a user whose page
		// reloaded would: the second must be the first's answer.
		for range 2 {
			st, b, h, err := post(ctx, base, apiKey, o.key, chatBody(o.prompt, o.stream))
			if h.Get("X-Oncegate-Request-Id") != "" {
				keep(&http.Response{Header: h})
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

// chatBody is a Chat Completions request for prompt.
func chatBody(prompt string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": "chat", "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	return b
}

// post sends body with an Idempotency-Key and reads the whole answer.
func post(ctx context.Context, base, apiKey, key string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
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

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
