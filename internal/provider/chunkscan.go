package provider

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/gw"
)

// Reading a Chat Completions stream chunk in one pass (docs/performance.md).
//
// Nearly every event of an OpenAI stream has one of a few shapes: the
// first chunk (the role), a text delta, a tool call's fragment, the finish
// reason, the usage. scanChunk reads those in one walk over the chunk's
// bytes, checking the JSON as encoding/json would before decoding it, and
// appends the events decodeChunk appends for the decoded oaChunk. It
// vouches for a chunk only when it can promise exactly that: every member
// is one it knows (those oaChunk reads, and the few the API sends that it
// ignores, such as object, created and obfuscation), each once, of its
// wire type's JSON type or null, under a key without escapes; there is at
// most one choice, of index 0; and every string it reads decodes to the
// bytes encoding/json decodes it to. Anything else — an error, a refusal,
// log probabilities, several choices, a member it does not know, a key
// that matches one only case-insensitively, invalid UTF-8, a lone
// surrogate — is declined, and Decode reads the chunk with encoding/json
// as before. FuzzChunkScan checks that the two agree.

// maxChunkTools is the most tool call fragments the walk takes in one
// chunk; OpenAI sends one.
const maxChunkTools = 4

// span is a JSON string's bytes between its quotes; plain: it holds no
// escape and no byte beyond ASCII, so its bytes are its value.
type span struct {
	start, end int
	plain      bool
}

func (s span) empty() bool { return s.end == s.start }

// chunkTool is what the walk reads of one tool call fragment.
type chunkTool struct {
	index          int
	id, name, args span
}

// chunkScan walks one chunk. Its methods report false for a chunk it
// cannot vouch for; the walk then stops.
type chunkScan struct {
	scan
	id, model, content, finish span
	tools                      [maxChunkTools]chunkTool
	nTools                     int
	usage                      gw.Usage
	hasUsage                   bool // a usage object, however empty
}

// scanChunk appends the events of one chunk to out, as decodeChunk does
// for a decoder whose stream has started or not. ok is false, and out
// unchanged, for a chunk it does not vouch for.
func scanChunk(data []byte, started bool, out []Event) (_ []Event, ok bool) {
	c := chunkScan{scan: scan{b: data}}
	c.ws()
	if !c.more() || c.b[c.i] != '{' || !c.top() {
		return out, false
	}
	if c.ws(); c.more() {
		return out, false
	}
	return c.events(started, out)
}

// events appends the events the walk read, in decodeChunk's order.
func (c *chunkScan) events(started bool, out []Event) ([]Event, bool) {
	n := len(out)
	ok := true
	str := func(s span) string {
		v, good := c.decode(s)
		ok = ok && good
		return v
	}
	if !started {
		out = append(out, Event{Kind: EvStart, ID: str(c.id), Model: str(c.model)})
	}
	if !c.content.empty() {
		out = append(out, Event{Kind: EvText, Text: str(c.content)})
	}
	for _, t := range c.tools[:c.nTools] {
		if !t.id.empty() || !t.name.empty() {
			out = append(out, Event{Kind: EvToolStart, ToolIndex: t.index, ToolID: str(t.id), ToolName: str(t.name)})
		}
		if !t.args.empty() {
			out = append(out, Event{Kind: EvToolArgs, ToolIndex: t.index, Args: str(t.args)})
		}
	}
	if !c.finish.empty() {
		finish := finishReasons[string(c.b[c.finish.start:c.finish.end])]
		if finish == "" {
			finish = str(c.finish)
		}
		out = append(out, Event{Kind: EvFinish, Finish: finish})
	}
	if c.hasUsage {
		out = append(out, Event{Kind: EvUsage, Usage: c.usage})
	}
	if !ok {
		return out[:n], false
	}
	return out, true
}

// finishReasons are the finish reasons OpenAI sends, by their bytes in a
// chunk: read without allocating them.
var finishReasons = map[string]string{"stop": "stop", "length": "length", "tool_calls": "tool_calls",
	"content_filter": "content_filter", "function_call": "function_call"}

// top reads the chunk's members (oaChunk's, and those it ignores).
func (c *chunkScan) top() bool {
	var seen uint8
	return c.members(func(key []byte) bool {
		switch string(key) {
		case "id":
			return once(&seen, 1<<0) && c.str(&c.id)
		case "model":
			return once(&seen, 1<<1) && c.str(&c.model)
		case "choices":
			return once(&seen, 1<<2) && c.choices()
		case "usage":
			return once(&seen, 1<<3) && c.usageObject()
		case "object", "created", "system_fingerprint", "service_tier", "obfuscation", "moderation",
			"prompt_filter_results": // Azure OpenAI's, on its first chunk
			return c.skip()
		}
		return false
	})
}

// choices reads no choice, or one of index 0.
func (c *chunkScan) choices() bool {
	if c.null() {
		return true
	}
	if !c.open('[') {
		return false
	}
	if c.close(']') {
		return true
	}
	if !c.more() || c.b[c.i] != '{' || !c.choice() {
		return false
	}
	c.ws()
	return c.close(']') // a second choice is left to encoding/json
}

func (c *chunkScan) choice() bool {
	var seen uint8
	return c.members(func(key []byte) bool {
		switch string(key) {
		case "index":
			v, ok := c.integer(9)
			return once(&seen, 1<<0) && ok && v == 0
		case "delta":
			return once(&seen, 1<<1) && c.delta()
		case "logprobs":
			return once(&seen, 1<<2) && c.null()
		case "finish_reason":
			return once(&seen, 1<<3) && c.str(&c.finish)
		case "content_filter_results": // Azure OpenAI's
			return c.skip()
		}
		return false
	})
}

func (c *chunkScan) delta() bool {
	var seen uint8
	return c.objectOrNull(func(key []byte) bool {
		var s span
		switch string(key) {
		case "role":
			return once(&seen, 1<<0) && c.str(&s)
		case "content":
			return once(&seen, 1<<1) && c.str(&c.content)
		case "refusal":
			return once(&seen, 1<<2) && c.str(&s) && s.empty()
		case "tool_calls":
			return once(&seen, 1<<3) && c.toolCalls()
		}
		return false
	})
}

func (c *chunkScan) toolCalls() bool {
	if c.null() {
		return true
	}
	if !c.open('[') {
		return false
	}
	if c.close(']') {
		return true
	}
	for {
		if c.nTools == maxChunkTools || !c.more() || c.b[c.i] != '{' || !c.tool(&c.tools[c.nTools]) {
			return false
		}
		c.nTools++
		if c.ws(); c.close(']') {
			return true
		}
		if !c.more() || c.b[c.i] != ',' {
			return false
		}
		c.i++
		c.ws()
	}
}

func (c *chunkScan) tool(t *chunkTool) bool {
	var seen uint8
	return c.members(func(key []byte) bool {
		var s span
		switch string(key) {
		case "index":
			v, ok := c.integer(9) // an int on any platform
			t.index = int(v)
			return once(&seen, 1<<0) && ok
		case "id":
			return once(&seen, 1<<1) && c.str(&t.id)
		case "type":
			return once(&seen, 1<<2) && c.str(&s)
		case "function":
			return once(&seen, 1<<3) && c.function(t)
		}
		return false
	})
}

func (c *chunkScan) function(t *chunkTool) bool {
	var seen uint8
	return c.objectOrNull(func(key []byte) bool {
		switch string(key) {
		case "name":
			return once(&seen, 1<<0) && c.str(&t.name)
		case "arguments":
			return once(&seen, 1<<1) && c.str(&t.args)
		}
		return false
	})
}

func (c *chunkScan) usageObject() bool {
	if c.null() {
		return true
	}
	if !c.more() || c.b[c.i] != '{' {
		return false
	}
	c.hasUsage = true
	var seen uint8
	return c.members(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return once(&seen, 1<<0) && c.count(&c.usage.InputTokens)
		case "completion_tokens":
			return once(&seen, 1<<1) && c.count(&c.usage.OutputTokens)
		case "total_tokens":
			var total int64
			return once(&seen, 1<<2) && c.count(&total)
		case "prompt_tokens_details":
			return once(&seen, 1<<3) && c.promptDetails()
		case "completion_tokens_details":
			return c.skip()
		}
		return false
	})
}

func (c *chunkScan) promptDetails() bool {
	var seen uint8
	return c.objectOrNull(func(key []byte) bool {
		switch string(key) {
		case "cached_tokens":
			return once(&seen, 1<<0) && c.count(&c.usage.CachedTokens)
		case "audio_tokens":
			return c.skip()
		}
		return false
	})
}

// members reads an object, at its '{', calling member with each key
// (without escapes, or the walk stops) to read its value.
// objectOrNull scans a null, or an object's members with member.
func (c *chunkScan) objectOrNull(member func(key []byte) bool) bool {
	if c.null() {
		return true
	}
	if !c.more() || c.b[c.i] != '{' {
		return false
	}
	return c.members(member)
}

func (c *chunkScan) members(member func(key []byte) bool) bool {
	if c.depth++; c.depth > maxScanDepth {
		return false
	}
	if !c.open('{') {
		return false
	}
	if c.close('}') {
		c.depth--
		return true
	}
	for {
		if !c.more() || c.b[c.i] != '"' {
			return false
		}
		start := c.i + 1
		if plain, ok := c.scan.str(); !ok || !plain {
			return false // an escape or a byte beyond ASCII may name a member under case folding
		}
		key := c.b[start : c.i-1]
		if c.ws(); !c.more() || c.b[c.i] != ':' {
			return false
		}
		c.i++
		c.ws()
		if !member(key) {
			return false
		}
		if c.ws(); c.close('}') {
			c.depth--
			return true
		}
		if !c.more() || c.b[c.i] != ',' {
			return false
		}
		c.i++
		c.ws()
	}
}

// once reports whether bit was not yet set in seen, and sets it: a
// repeated member is left to encoding/json, which merges or overwrites.
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// open reads the byte b and the space after it.
func (c *chunkScan) open(b byte) bool {
	if !c.more() || c.b[c.i] != b {
		return false
	}
	c.i++
	c.ws()
	return true
}

// close reads the byte b if it is next.
func (c *chunkScan) close(b byte) bool {
	if c.more() && c.b[c.i] == b {
		c.i++
		return true
	}
	return false
}

// null reads a null if one is next.
func (c *chunkScan) null() bool {
	return c.more() && c.b[c.i] == 'n' && c.literal("null")
}

// str reads a string into s, or a null (s stays empty).
func (c *chunkScan) str(s *span) bool {
	if c.null() {
		return true
	}
	if !c.more() || c.b[c.i] != '"' {
		return false
	}
	start := c.i + 1
	plain, ok := c.scan.str()
	*s = span{start: start, end: c.i - 1, plain: plain}
	return ok
}

// integer reads an integer of at most digits digits (so that it fits
// the Go type), or a null (0).
func (c *chunkScan) integer(digits int) (int64, bool) {
	if c.null() {
		return 0, true
	}
	start := c.i
	v, ok := c.scan.integer()
	n := c.i - start
	if ok && c.b[start] == '-' {
		n--
	}
	return v, ok && n <= digits
}

// count reads a token count into dst, or a null (dst stays 0).
func (c *chunkScan) count(dst *int64) bool {
	v, ok := c.integer(18)
	*dst = v
	return ok
}

// decode is the string s as encoding/json decodes it. ok is false for
// what encoding/json would replace with U+FFFD (invalid UTF-8, a lone
// surrogate): those are left to it.
func (c *chunkScan) decode(s span) (string, bool) {
	raw := c.b[s.start:s.end]
	if s.plain {
		return string(raw), true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), utf8.Valid(raw)
	}
	return unquote(raw)
}

// unquote decodes the bytes between a JSON string's quotes, which
// scan.str has checked: every escape is complete and well formed.
func unquote(raw []byte) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '\\':
			r, n := unescape(raw[i:])
			if r < 0 {
				return "", false
			}
			b.WriteRune(r)
			i += n
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(raw) && raw[j] != '\\' && raw[j] < utf8.RuneSelf {
				j++
			}
			b.Write(raw[i:j])
			i = j
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				return "", false
			}
			b.Write(raw[i : i+n])
			i += n
		}
	}
	return b.String(), true
}

// unescape decodes the escape that esc starts with: its rune (-1 for a
// lone surrogate) and its length, a surrogate pair's two escapes as one.
func unescape(esc []byte) (rune, int) {
	if esc[1] != 'u' {
		switch esc[1] {
		case 'b':
			return '\b', 2
		case 'f':
			return '\f', 2
		case 'n':
			return '\n', 2
		case 'r':
			return '\r', 2
		case 't':
			return '\t', 2
		}
		return rune(esc[1]), 2 // '"', '\\' or '/'
	}
	r := hex4(esc[2:6])
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	if len(esc) < 12 || esc[6] != '\\' || esc[7] != 'u' || !isHex(esc[8]) || !isHex(esc[9]) || !isHex(esc[10]) || !isHex(esc[11]) {
		return -1, 0
	}
	if pair := utf16.DecodeRune(r, hex4(esc[8:12])); pair != utf8.RuneError {
		return pair, 12
	}
	return -1, 0
}

// hex4 is the value of four hex digits.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
