package provider

import "github.com/oncegate/oncegate/internal/gw"

// Reading a same-protocol answer without decoding it (docs/performance.md).
//
// A whole answer in the client's own protocol reaches the client as the
// provider's bytes. All the gateway keeps of it is its usage, so instead
// of building a Response it walks the body once, checking it as
// DecodeResponse would and reading the usage members on the way. The walk
// vouches for a body only when it can promise that DecodeResponse reads
// it without error and the same usage; anything else — a malformed body,
// a member of another type than the wire type's, a key that matches one
// only case-insensitively, a repeated member, an answer without usage —
// is left to DecodeResponse, which reads or refuses it exactly as before.

// Scanner is an Endpoint that can read a whole success body of its own
// protocol for its usage alone (found by type assertion).
type Scanner interface {
	// Scan reads the usage of a whole success body of operation op. ok is
	// true only for a body Decode reads without error, and the usage is
	// then the one Decode reads; ok is false for any body Scan cannot
	// vouch for that way, which the caller then Decodes.
	Scan(op Op, body []byte) (u gw.Usage, ok bool)
}

// ScanResponse is Scanner.Scan for an upstream success body of protocol
// p, as DecodeResponse(p, body) reads it. It allocates nothing. It vouches
// for no Responses body (ok is false).
func ScanResponse(p Protocol, body []byte) (gw.Usage, bool) {
	var top []member
	switch p {
	case OpenAI:
		top = oaTop
	case Anthropic:
		top = anTop
	case Embeddings:
		top = embTop
	default:
		return gw.Usage{}, false
	}
	s := scan{b: body}
	s.ws()
	if !s.more() || s.b[s.i] != '{' || !s.object(top) {
		return gw.Usage{}, false
	}
	if s.ws(); s.more() {
		return gw.Usage{}, false
	}
	v := &s.vals
	var u gw.Usage
	switch p {
	case OpenAI:
		if v[slotCount] == 0 { // decodeOpenAIResponse: no choices
			return gw.Usage{}, false
		}
		u = gw.Usage{InputTokens: v[slotIn], OutputTokens: v[slotOut], CachedTokens: v[slotCached]}
	case Anthropic:
		if v[slotMatch] == 0 { // decodeAnthropicResponse: type is not "message"
			return gw.Usage{}, false
		}
		u = (&anUsage{InputTokens: v[slotIn], OutputTokens: v[slotOut], CacheCreationInputTokens: v[slotWrite],
			CacheReadInputTokens: v[slotCached]}).usage()
	case Embeddings:
		if v[slotMatch] == 0 || v[slotCount] == 0 { // decodeEmbeddingsResponse: not a list of embeddings
			return gw.Usage{}, false
		}
		u = gw.Usage{InputTokens: v[slotIn]}
	}
	// An answer without usage has its output estimated from its text:
	// that needs the decoded answer.
	return u, u != gw.Usage{}
}

// kind is the JSON type a member is decoded into.
type kind uint8

const (
	kindAny    kind = iota // json.RawMessage, or a member the wire type does not have
	kindString             // string or *string
	kindInt                // int or int64
	kindBool               // bool
	kindObject             // a struct, or a pointer to one
	kindArray              // a slice of structs (of json.RawMessage when fields is nil)
)

// member is one member of a wire type, as the walk checks it.
type member struct {
	name string
	kind kind
	// fields are a kindObject's members, or the members of a kindArray's
	// elements (nil: any values).
	fields []member
	// slot is where the walk keeps what it read (0: nowhere): a
	// kindInt's value, a kindArray's length, 1 when a kindString is want.
	slot int
	want string
}

// The slots of scan.vals.
const (
	slotNone = iota
	slotIn
	slotOut
	slotCached
	slotWrite
	slotCount
	slotMatch
	slots
)

// The members of oaResponse, which decodeOpenAIResponse reads.
var (
	oaFunctionMembers = []member{{name: "name", kind: kindString}, {name: "arguments", kind: kindString}}
	oaToolCallMembers = []member{{name: "index", kind: kindInt}, {name: "id", kind: kindString}, {name: "type", kind: kindString},
		{name: "function", kind: kindObject, fields: oaFunctionMembers}}
	oaMessageMembers = []member{{name: "role", kind: kindString}, {name: "content", kind: kindString}, {name: "refusal", kind: kindString},
		{name: "tool_calls", kind: kindArray, fields: oaToolCallMembers}}
	oaChoiceMembers = []member{{name: "index", kind: kindInt}, {name: "message", kind: kindObject, fields: oaMessageMembers},
		{name: "logprobs", kind: kindAny}, {name: "finish_reason", kind: kindString}}
	oaUsageMembers = []member{{name: "prompt_tokens", kind: kindInt, slot: slotIn}, {name: "completion_tokens", kind: kindInt, slot: slotOut},
		{name: "total_tokens", kind: kindInt},
		{name: "prompt_tokens_details", kind: kindObject, fields: []member{{name: "cached_tokens", kind: kindInt, slot: slotCached}}}}
	oaTop = []member{{name: "id", kind: kindString}, {name: "object", kind: kindString}, {name: "created", kind: kindInt},
		{name: "model", kind: kindString}, {name: "choices", kind: kindArray, fields: oaChoiceMembers, slot: slotCount},
		{name: "usage", kind: kindObject, fields: oaUsageMembers}, {name: "system_fingerprint", kind: kindString}}
)

// The members of anResponse, which decodeAnthropicResponse reads.
var (
	anSourceMembers = []member{{name: "type", kind: kindString}, {name: "media_type", kind: kindString}, {name: "data", kind: kindString},
		{name: "url", kind: kindString}}
	anBlockMembers = []member{{name: "type", kind: kindString}, {name: "text", kind: kindString},
		{name: "source", kind: kindObject, fields: anSourceMembers}, {name: "id", kind: kindString}, {name: "name", kind: kindString},
		{name: "input", kind: kindAny}, {name: "tool_use_id", kind: kindString}, {name: "content", kind: kindAny},
		{name: "is_error", kind: kindBool}, {name: "thinking", kind: kindString}, {name: "signature", kind: kindString},
		{name: "data", kind: kindString}}
	anUsageMembers = []member{{name: "input_tokens", kind: kindInt, slot: slotIn}, {name: "output_tokens", kind: kindInt, slot: slotOut},
		{name: "cache_creation_input_tokens", kind: kindInt, slot: slotWrite},
		{name: "cache_read_input_tokens", kind: kindInt, slot: slotCached}}
	anTop = []member{{name: "id", kind: kindString}, {name: "type", kind: kindString, slot: slotMatch, want: "message"},
		{name: "role", kind: kindString}, {name: "model", kind: kindString},
		{name: "content", kind: kindArray, fields: anBlockMembers}, {name: "stop_reason", kind: kindString},
		{name: "stop_sequence", kind: kindString}, {name: "usage", kind: kindObject, fields: anUsageMembers}}
)

// The members decodeEmbeddingsResponse reads.
var embTop = []member{{name: "object", kind: kindString, slot: slotMatch, want: "list"},
	{name: "data", kind: kindArray, slot: slotCount}, {name: "model", kind: kindString},
	{name: "usage", kind: kindObject, fields: []member{{name: "prompt_tokens", kind: kindInt, slot: slotIn}}}}

// maxScanDepth bounds the walk's nesting (encoding/json allows 10,000:
// a deeper body is left to it).
const maxScanDepth = 512

// scan walks one JSON body. Every method reports false for a body it
// cannot vouch for; the walk then stops.
type scan struct {
	b     []byte
	i     int
	depth int
	vals  [slots]int64
}

func (s *scan) more() bool { return s.i < len(s.b) }

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object reads an object of the members fields, at its '{'; with no
// fields, any object, each member skipped.
func (s *scan) object(fields []member) bool {
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	s.i++
	if s.ws(); s.more() && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	var seen uint64
	for {
		if !s.more() || s.b[s.i] != '"' {
			return false
		}
		start := s.i + 1
		plain, ok := s.str()
		if !ok || !plain && len(fields) > 0 {
			// A key with an escape or beyond ASCII may name a member
			// under encoding/json's case folding.
			return false
		}
		key := s.b[start : s.i-1]
		if s.ws(); !s.more() || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		j := find(fields, key)
		switch {
		case j >= 0:
			if seen&(1<<j) != 0 { // a repeated member: encoding/json merges or overwrites
				return false
			}
			seen |= 1 << j
			if !s.value(&fields[j]) {
				return false
			}
		case j == -2:
			return false
		default:
			if !s.skip() {
				return false
			}
		}
		if s.ws(); !s.more() {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// find is key's index in fields, -1 when it is none of them, -2 when it
// is one of them only case-insensitively.
func find(fields []member, key []byte) int {
	for j := range fields {
		if fields[j].name == string(key) {
			return j
		}
	}
	for j := range fields {
		if equalFoldASCII(fields[j].name, key) {
			return -2
		}
	}
	return -1
}

func equalFoldASCII(name string, key []byte) bool {
	if len(name) != len(key) {
		return false
	}
	for i := range len(key) {
		a, b := name[i], key[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// value reads a member's value, at its first byte, as m's Go type
// takes it: null, or the JSON type of m's kind.
func (s *scan) value(m *member) bool {
	if m.kind == kindAny {
		return s.skip()
	}
	if !s.more() {
		return false
	}
	if s.b[s.i] == 'n' {
		return s.literal("null") // every kind takes null, as nothing
	}
	switch m.kind {
	case kindString:
		if s.b[s.i] != '"' {
			return false
		}
		start := s.i + 1
		plain, ok := s.str()
		if ok && m.slot != slotNone && plain && string(s.b[start:s.i-1]) == m.want {
			s.vals[m.slot] = 1
		}
		return ok
	case kindInt:
		v, ok := s.integer()
		if ok && m.slot != slotNone {
			s.vals[m.slot] = v
		}
		return ok
	case kindBool:
		if s.b[s.i] == 't' {
			return s.literal("true")
		}
		return s.literal("false")
	case kindObject:
		return s.b[s.i] == '{' && s.object(m.fields)
	case kindArray:
		if s.b[s.i] != '[' {
			return false
		}
		n, ok := s.array(m.fields)
		if ok && m.slot != slotNone {
			s.vals[m.slot] = n
		}
		return ok
	}
	return false
}

// array reads an array, at its '[': of objects of the members fields (or
// null), or of any values when fields is nil. It returns its length.
func (s *scan) array(fields []member) (int64, bool) {
	if s.depth++; s.depth > maxScanDepth {
		return 0, false
	}
	s.i++
	if s.ws(); s.more() && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return 0, true
	}
	elem := member{kind: kindObject, fields: fields}
	if fields == nil {
		elem.kind = kindAny
	}
	var n int64
	for {
		if !s.value(&elem) {
			return 0, false
		}
		n++
		if s.ws(); !s.more() {
			return 0, false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			s.depth--
			return n, true
		default:
			return 0, false
		}
	}
}

// skip reads any value, at its first byte, checking it as encoding/json
// checks a body before it decodes one.
func (s *scan) skip() bool {
	if !s.more() {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(nil) // any object: no member is read
	case c == '[':
		_, ok := s.array(nil)
		return ok
	case c == '"':
		_, ok := s.str()
		return ok
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		_, ok := s.number()
		return ok
	}
	return false
}

// plainByte marks the bytes a string holds as they are: printable ASCII
// but for '"' and '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string, at its opening quote, to just past its closing
// one. plain: it holds no escape and no byte beyond ASCII, so its bytes
// are its value.
func (s *scan) str() (plain, ok bool) {
	b, i := s.b, s.i+1
	plain = true
	for i < len(b) {
		c := b[i]
		if plainByte[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			s.i = i + 1
			return plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return false, false
				}
				i += 6
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		default: // beyond ASCII: encoding/json takes any byte here
			plain = false
			i++
		}
	}
	return false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal reads the literal lit.
func (s *scan) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number reads a number; whole: it has neither fraction nor exponent.
func (s *scan) number() (whole, ok bool) {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false, false
	}
	whole = true
	if i < len(b) && b[i] == '.' {
		whole = false
		if i++; i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false, false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		whole = false
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false, false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return whole, true
}

// integer reads a number that encoding/json decodes into an int64: no
// fraction, no exponent. It vouches for at most 18 digits, which cannot
// overflow.
func (s *scan) integer() (int64, bool) {
	start := s.i
	whole, ok := s.number()
	if !ok || !whole {
		return 0, false
	}
	digits, neg := s.b[start:s.i], false
	if digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	if len(digits) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}
