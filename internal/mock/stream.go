package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// stream answers with server-sent events in the request's protocol,
// applying any mid-stream fault. Each token is one event, flushed on its
// own and counted once written.
func (x *exchange) stream(tokens []string, finish string) {
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("x-request-id", "req_mock"+x.id)
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	id := "chatcmpl-mock" + x.id
	if x.proto == provider.Anthropic {
		id = "msg_mock" + x.id
	}
	enc := provider.NewEncoder(x.proto, id, time.Now().Unix(), x.req.Model)
	if x.rs != nil {
		enc = provider.NewResponsesEncoder(x.rs.shell)
	}
	send := func(b []byte) bool {
		if _, err := x.w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(enc.Start(nil, x.prompt)) {
		return
	}
	pieces, tool := tokens, false
	if t, ok := x.wantsTool(); ok {
		pieces, tool, finish = toolArgs, true, provider.FinishToolCalls
		if !send(enc.ToolStart(nil, 0, x.toolCallID(), t.Name)) {
			return
		}
	}
	if x.proto == provider.Anthropic && x.req.Thinking && !tool {
		te := enc.(provider.ThinkingEncoder)
		for _, p := range thinkingTokens {
			if !send(te.Thinking(nil, p)) {
				return
			}
			x.countOut(1)
		}
		if !send(te.Signature(nil, "sig-mock"+x.id)) {
			return
		}
	}
	f := x.fault
	for i, p := range pieces {
		if f != nil && f.Type == FaultCommitThenReset && i == f.After {
			x.commit(tokens, finish, "", false)
			panic(http.ErrAbortHandler) // committed whole; the connection drops mid-stream
		}
		if f != nil && i == f.After {
			if !x.midStream(f, send, enc) {
				return
			}
		}
		if i > 0 && !x.wait(x.m.cfg.TokenInterval) {
			return
		}
		var b []byte
		switch {
		case tool:
			b = enc.ToolArgs(nil, 0, p)
		case x.logprobs:
			b = enc.(provider.LogprobsEncoder).TextLogprobs(nil, p, Logprobs(p))
		default:
			b = enc.Text(nil, p)
		}
		if !send(b) {
			return
		}
		x.countOut(1)
	}
	if f != nil && f.After >= len(pieces) && f.Type != FaultNoDone {
		if !x.midStream(f, send, enc) {
			return
		}
	}
	if f != nil && f.Type == FaultCommitThenReset {
		x.commit(tokens, finish, "", true)
		panic(http.ErrAbortHandler)
	}
	tail := enc.Finish(nil, finish, x.usage(x.out), true)
	if x.rs != nil {
		x.commit(tokens, finish, "", true)
	}
	if f != nil && f.Type == FaultNoDone {
		tail = tail[:len(tail)-len(terminator(x.proto))]
	}
	send(tail)
}

// midStream applies a fault once After tokens are out; it reports whether
// the stream goes on.
func (x *exchange) midStream(f *Fault, send func([]byte) bool, enc provider.Encoder) bool {
	switch f.Type {
	case FaultSlowFirstToken:
		return x.wait(time.Duration(f.DelayMS) * time.Millisecond)
	case FaultDropAfter:
		panic(http.ErrAbortHandler) // the server drops the connection: no terminating chunk
	case FaultStallAfter:
		x.block(nil)
		return false
	case FaultMalformedAfter:
		return send(sse.AppendEvent(nil, eventType(x.proto), []byte(`{"id":"chatcmpl-broken","choices":[{"delta":{"content":"garbage`)))
	case FaultStreamError:
		ce := &provider.ClientError{Type: "overloaded_error", Code: "overloaded_error", Message: "Overloaded"}
		b := enc.Error(nil, ce)
		send(b)
		return false
	}
	return true
}

func eventType(p provider.Protocol) string {
	if p == provider.Anthropic {
		return "content_block_delta"
	}
	return ""
}

// terminator is the final frame a no_done fault leaves out.
func terminator(p provider.Protocol) string {
	if p == provider.Anthropic {
		return "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	}
	return "data: [DONE]\n\n"
}

// thinkingTokens is the extended thinking the mock streams before its
// answer when a request asks for thinking.
var thinkingTokens = []string{"Let", " me", " think", " about", " it."}

// ThinkingText is the thinking a client reads from the mock.
func ThinkingText() string { return strings.Join(thinkingTokens, "") }

// Logprobs is the choice.logprobs the mock sends with a token, in
// OpenAI's shape: a fixed log probability and the token's bytes.
func Logprobs(token string) json.RawMessage {
	bs := make([]int, len(token))
	for i := range len(token) {
		bs[i] = int(token[i])
	}
	b, _ := json.Marshal(map[string]any{"content": []map[string]any{{"token": token, "logprob": -0.25,
		"bytes": bs, "top_logprobs": []any{}}}, "refusal": nil})
	return b
}
