package provider

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// Rewriting a same-protocol request in place (docs/performance.md).
//
// A request whose route speaks its client's protocol goes upstream as the
// client's bytes with only what the gateway sets replaced: the model, the
// stream flag and its usage option, the output limit. The rewrite splits
// the body's top-level members into spans, replaces, drops or adds the
// few it must, and copies everything else — the messages, the tools,
// every member the gateway does not model, and the whitespace between
// them — as it is, in one buffer of the size it needs. The document it
// writes is the one the decode-and-re-encode path (rebuildOpenAI,
// rebuildAnthropic) writes, up to the order of members; a body it cannot
// split plainly (a key spelled with escapes or not valid UTF-8, a key
// twice, very many members) is left to that path.

// maxRewriteMembers bounds the top-level members of a body rewritten in
// place; a body with more is rebuilt.
const maxRewriteMembers = 48

// memberSpan is where one member of an object lies in its bytes: its key
// from the opening quote to just past the closing one, its value.
type memberSpan struct {
	k0, k1, v0, v1 int
}

func (m *memberSpan) key(b []byte) []byte { return b[m.k0+1 : m.k1-1] }

// splitMembers splits a JSON object into the spans of its members, into
// buf. ok is false when b is not an object of plain, distinct keys, or
// has more members than buf holds. b must be valid JSON (the caller has
// parsed it): values are skipped, not checked.
func splitMembers(b []byte, buf []memberSpan) (ms []memberSpan, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	ms = buf[:0]
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return ms, skipSpace(b, i+1) == len(b)
	}
	for ; ; i = skipSpace(b, i+1) {
		if i >= len(b) || b[i] != '"' || len(ms) == cap(ms) {
			return nil, false
		}
		kEnd := stringEnd(b, i)
		if kEnd < 0 {
			return nil, false
		}
		k := b[i+1 : kEnd-1]
		if bytes.IndexByte(k, '\\') >= 0 || !utf8.Valid(k) {
			return nil, false // encoding/json unescapes or repairs such a key
		}
		for j := range ms {
			if bytes.Equal(ms[j].key(b), k) {
				return nil, false // encoding/json keeps the last
			}
		}
		j := skipSpace(b, kEnd)
		if j >= len(b) || b[j] != ':' {
			return nil, false
		}
		j = skipSpace(b, j+1)
		vEnd := valueEnd(b, j)
		if vEnd < 0 {
			return nil, false
		}
		ms = append(ms, memberSpan{k0: i, k1: kEnd, v0: j, v1: vEnd})
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == '}' {
			return ms, skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
	}
}

// memberEdit sets a member's value, adding the member if the object has
// none of that name, or (val nil) drops it.
type memberEdit struct {
	key string
	val []byte
}

// memberNamed is the span of the member named key, or nil.
func memberNamed(b []byte, ms []memberSpan, key string) *memberSpan {
	for i := range ms {
		if string(ms[i].key(b)) == key {
			return &ms[i]
		}
	}
	return nil
}

// rewriteMembers writes the object b, split into ms, with edits applied:
// every member no edit names keeps its bytes and the bytes around it;
// added members go last.
func rewriteMembers(b []byte, ms []memberSpan, edits []memberEdit) []byte {
	n := len(b)
	for _, e := range edits {
		n += len(e.key) + len(e.val) + 4
	}
	out := make([]byte, 0, n)
	out = append(out, b[:ms[0].k0]...)
	var applied uint64
	emitted, prevEmitted := false, false
	for i := range ms {
		m := &ms[i]
		val := b[m.v0:m.v1]
		e := -1
		for j := range edits {
			if string(m.key(b)) == edits[j].key {
				e = j
				break
			}
		}
		if e >= 0 {
			applied |= 1 << e
			if val = edits[e].val; val == nil {
				prevEmitted = false
				continue
			}
		}
		switch {
		case prevEmitted:
			out = append(out, b[ms[i-1].v1:m.k0]...) // the separator as the client wrote it
		case emitted:
			out = append(out, ',')
		}
		out = append(out, b[m.k0:m.v0]...)
		out = append(out, val...)
		emitted, prevEmitted = true, true
	}
	for j, e := range edits {
		if applied&(1<<j) != 0 || e.val == nil {
			continue
		}
		if emitted {
			out = append(out, ',')
		}
		out = appendJSONString(out, e.key)
		out = append(out, ':')
		out = append(out, e.val...)
		emitted = true
	}
	return append(out, b[ms[len(ms)-1].v1:]...)
}

// rewriteOpenAI is patchOpenAI without a continuation, in place: the
// body rebuildOpenAI writes (clientStream and clientMax are what the
// client asked for), or ok false when the body is not one it can split.
func rewriteOpenAI(body []byte, t Target, clientStream bool, clientMax int64) ([]byte, bool) {
	sentLimit := t.MaxTokens == 0 || clientMax == t.MaxTokens
	if !t.Stream && !clientStream && sentLimit {
		if b, ok := replaceModel(body, t.Model); ok {
			return b, true // the common case: only the model changes
		}
	}
	var buf [maxRewriteMembers]memberSpan
	ms, ok := splitMembers(body, buf[:])
	if !ok || len(ms) == 0 {
		return nil, false
	}
	// The edits and the values they write stay on the stack.
	var model, limit [64]byte
	var es [5]memberEdit
	es[0] = memberEdit{"model", appendJSONString(model[:0], t.Model)}
	n := 1
	if t.Stream {
		opts, ok := includeUsage(body, memberNamed(body, ms, "stream_options"))
		if !ok {
			return nil, false
		}
		es[1], es[2], n = memberEdit{"stream", jsonTrue}, memberEdit{"stream_options", opts}, 3
	} else {
		es[1], es[2], n = memberEdit{"stream", nil}, memberEdit{"stream_options", nil}, 3
	}
	if t.MaxTokens > 0 {
		v := strconv.AppendInt(limit[:0], t.MaxTokens, 10)
		if memberNamed(body, ms, "max_completion_tokens") != nil {
			es[3], es[4], n = memberEdit{"max_completion_tokens", v}, memberEdit{"max_tokens", nil}, 5
		} else {
			es[3], n = memberEdit{"max_tokens", v}, 4
		}
	}
	return rewriteMembers(body, ms, es[:n]), true
}

// Values the rewrite writes; never modified.
var (
	jsonTrue          = []byte("true")
	onlyIncludeUsage  = []byte(`{"include_usage":true}`)
	includeUsageEdits = []memberEdit{{"include_usage", jsonTrue}}
)

// includeUsage is a client's stream_options (m, nil when it sent none)
// asking for usage: setStream's, in place.
func includeUsage(body []byte, m *memberSpan) ([]byte, bool) {
	if m == nil || body[m.v0] == 'n' { // absent or null
		return onlyIncludeUsage, true
	}
	raw := body[m.v0:m.v1]
	var buf [8]memberSpan
	ms, ok := splitMembers(raw, buf[:])
	if !ok {
		return nil, false
	}
	if len(ms) == 0 {
		return onlyIncludeUsage, true
	}
	return rewriteMembers(raw, ms, includeUsageEdits), true
}

// rewriteAnthropic is patchAnthropic without a continuation, in place:
// the body rebuildAnthropic writes, or ok false when the body is not one
// it can split.
func rewriteAnthropic(body []byte, t Target) ([]byte, bool) {
	var buf [maxRewriteMembers]memberSpan
	ms, ok := splitMembers(body, buf[:])
	if !ok || len(ms) == 0 {
		return nil, false
	}
	var model, limit [64]byte
	var es [4]memberEdit
	es[0] = memberEdit{"model", appendJSONString(model[:0], t.Model)}
	n := 1
	if t.Stream {
		es[1], n = memberEdit{"stream", jsonTrue}, 2
	} else {
		es[1], es[2], n = memberEdit{"stream", nil}, memberEdit{"stream_options", nil}, 3
	}
	if t.MaxTokens > 0 {
		es[n], n = memberEdit{"max_tokens", strconv.AppendInt(limit[:0], t.MaxTokens, 10)}, n+1
	}
	return rewriteMembers(body, ms, es[:n]), true
}

// MemberEdit sets a top-level member of a JSON object (ReplaceMembers):
// Value replaces the member's value, or adds the member when the object
// has none of that name; a nil Value drops it.
type MemberEdit struct {
	Key   string
	Value []byte
}

// ReplaceMembers writes the JSON object body with edits applied to its
// top-level members and every other byte as it is. ok is false for a body
// it cannot split plainly (not an object; a key spelled with escapes or
// not valid UTF-8; a key twice; very many members): the caller then
// decodes and re-encodes it. body must be valid JSON.
func ReplaceMembers(body []byte, edits ...MemberEdit) ([]byte, bool) {
	var buf [maxRewriteMembers]memberSpan
	ms, ok := splitMembers(body, buf[:])
	if !ok || len(ms) == 0 || len(edits) > 64 {
		return nil, false
	}
	es := make([]memberEdit, len(edits))
	for i, e := range edits {
		es[i] = memberEdit{e.Key, e.Value}
	}
	return rewriteMembers(body, ms, es), true
}
