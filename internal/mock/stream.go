package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// stream answers in the request's protocol, applying any mid-stream
// fault. Each token is one frame, flushed on its own and counted once
// written.
func (x *exchange) stream(tokens []string, finish string) {
	st := x.c.streamer(x)
	st.header(x.w.Header())
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	send := func(b []byte) bool {
		if len(b) == 0 {
			return x.r.Context().Err() == nil
		}
		if _, err := x.w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// Several choices go out interleaved, one frame per choice and
	// token: each frame names its choice (OpenAI's index).
	ch, _ := st.(choicer)
	n := 1
	if ch != nil {
		n = max(1, x.req.choices)
		ch.choices(n)
	}
	to := func(c int) {
		if ch != nil {
			ch.choice(c)
		}
	}
	if !send(st.start()) {
		return
	}
	pieces, tool := tokens, false
	lists := [][]string{tokens}
	for c := 1; c < n; c++ {
		t, _ := x.planChoice(c)
		lists = append(lists, t)
	}
	if name, ok := x.req.tool(); ok {
		pieces, tool, finish = toolArgs, true, finishTools
		for c := range n {
			lists[c] = toolArgs
			to(c)
			if !send(st.toolStart(x.choiceToolCallID(c), name)) {
				return
			}
		}
	}
	if th, ok := st.(thinker); ok && x.req.thinking && !tool {
		for _, p := range thinkingTokens {
			if !send(th.thinking(p)) {
				return
			}
			x.countOut(1)
		}
		if !send(th.signature("sig-mock" + x.id)) {
			return
		}
	}
	f := x.fault
	for i := range pieces {
		if f != nil && f.Type == FaultCommitThenReset && i == f.After {
			x.commit(x.answerOf(tokens, finish), "", false)
			panic(http.ErrAbortHandler) // committed whole; the connection drops mid-stream
		}
		if f != nil && i == f.After {
			if !x.midStream(f, send, st) {
				return
			}
		}
		if i > 0 && !x.wait(x.m.cfg.TokenInterval) {
			return
		}
		for c := range n {
			if i >= len(lists[c]) {
				continue
			}
			to(c)
			var b []byte
			if tool {
				b = st.toolArgs(lists[c][i], i == len(pieces)-1)
			} else {
				b = st.text(lists[c][i])
			}
			if c, ok := st.(checksummed); ok && f != nil && f.Type == FaultBadCRCAfter && i == f.After {
				// This token's own frame, spoiled: a reader that skips it
				// loses the token.
				b = c.badCRC(b, f.ErrorType == "prelude")
			}
			if !send(b) {
				return
			}
			x.countOut(1)
		}
		to(0)
	}
	if f != nil && f.After >= len(pieces) && f.Type != FaultNoDone {
		if !x.midStream(f, send, st) {
			return
		}
	}
	if f != nil && f.Type == FaultCommitThenReset {
		x.commit(x.answerOf(tokens, finish), "", true)
		panic(http.ErrAbortHandler)
	}
	// A Responses stream's finish commits the response it ends with.
	send(st.finish(finish, x.usage(x.out), f == nil || f.Type != FaultNoDone))
}

// midStream applies a fault once After tokens are out; it reports whether
// the stream goes on.
func (x *exchange) midStream(f *Fault, send func([]byte) bool, st streamer) bool {
	switch f.Type {
	case FaultSlowFirstToken:
		return x.wait(time.Duration(f.DelayMS) * time.Millisecond)
	case FaultDropAfter:
		panic(http.ErrAbortHandler) // the server drops the connection: no terminating chunk
	case FaultStallAfter:
		x.block(nil)
		return false
	case FaultMalformedAfter:
		return send(st.malformed())

	case FaultStreamError:
		send(st.fail(f))
		return false
	}
	return true
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
