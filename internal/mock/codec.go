package mock

import "net/http"

// codec is one wire protocol of the mock: how it answers, streams and
// refuses. Each fake decodes its own requests into an ask; the shared
// core (script, counters, text, timing, faults) drives the codec.
type codec interface {
	// toolPrefix starts the ids of the mock's tool calls.
	toolPrefix() string
	// body is the complete answer to a request that did not stream.
	body(x *exchange, a *answer) []byte
	// streamer begins a streamed answer.
	streamer(x *exchange) streamer
	// fail writes the protocol's error for a status-like fault.
	fail(x *exchange, f *Fault)
}

// answer is what a non-streamed answer says.
type answer struct {
	text   string
	tool   *toolCall
	finish string
	// usage is the whole answer's: every choice's output.
	usage usage
	// others are the choices after the first (index 1…) when the
	// request asked for several; their usage is not set.
	others []*answer
}

// toolCall is the mock's tool call.
type toolCall struct{ id, name, args string }

// streamer writes the frames of one streamed answer. Each method returns
// the bytes of its frames (nil: nothing to send).
type streamer interface {
	// header sets the response headers before the status line.
	header(h http.Header)
	start() []byte
	text(p string) []byte
	toolStart(id, name string) []byte
	// toolArgs is one piece of the tool call's arguments; last marks the
	// final one.
	toolArgs(p string, last bool) []byte
	// finish is the stop reason and usage; terminate false leaves out the
	// protocol's terminator (the no_done fault).
	finish(finish string, u usage, terminate bool) []byte
	// malformed is a frame that is not valid in the protocol.
	malformed() []byte
	// fail is an error reported inside the stream.
	fail(f *Fault) []byte
}

// choicer is a streamer whose protocol has several choices of one
// answer (OpenAI's n, Gemini's candidateCount): choice makes the frames
// from now on belong to choice i; n, told before start, is how many
// there are (start and finish cover each).
type choicer interface {
	choices(n int)
	choice(i int)
}

// thinker is a streamer that can send extended thinking.
type thinker interface {
	thinking(p string) []byte
	signature(s string) []byte
}

// authenticator checks a request's credentials before its fault; it
// reports whether the request may go on, having written the refusal if
// not.
type authenticator interface {
	authenticate(x *exchange, body []byte) bool
}

// checksummed is a streamer whose framing carries checksums (Bedrock's
// event stream): it can spoil a frame's.
type checksummed interface {
	// badCRC returns frame with its message CRC — or, if prelude, its
	// prelude CRC — wrong.
	badCRC(frame []byte, prelude bool) []byte
}
