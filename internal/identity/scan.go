package identity

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// canon is a single-pass RFC 8785 canonicalizer over valid UTF-8 input.
type canon struct {
	in      []byte
	pos     int
	out     []byte
	scratch []byte
}

func (c *canon) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrNotCanonicalizable, c.pos, fmt.Sprintf(format, args...))
}

func (c *canon) ws() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value(depth int) error {
	if depth > maxDepth {
		return c.fail("nested deeper than %d", maxDepth)
	}
	if c.pos >= len(c.in) {
		return c.fail("unexpected end of input")
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		return c.object(depth)
	case b == '[':
		return c.array(depth)
	case b == '"':
		return c.str()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	}
	return c.fail("unexpected character %q", c.in[c.pos])
}

func (c *canon) literal(lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return c.fail("invalid literal")
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

// member is one object member: its decoded key and where its canonical
// "key":value bytes sit in out.
type member struct {
	key        string
	start, end int
}

func (c *canon) object(depth int) error {
	c.pos++ // '{'
	c.ws()
	begin := len(c.out)
	var members []member
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '{', '}')
		return nil
	}
	for {
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.fail("object key is not a string")
		}
		start := len(c.out)
		if err := c.str(); err != nil {
			return err
		}
		// A canonical string's escapes (\" \\ \b \f \n \r \t \u00XX) are
		// all Go escapes too, so Unquote recovers the key.
		key, err := strconv.Unquote(string(c.out[start:]))
		if err != nil {
			return c.fail("object key: %v", err)
		}
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.fail("expected ':' after object key")
		}
		c.pos++
		c.out = append(c.out, ':')
		c.ws()
		if err := c.value(depth + 1); err != nil {
			return err
		}
		members = append(members, member{key: key, start: start, end: len(c.out)})
		c.ws()
		if c.pos >= len(c.in) {
			return c.fail("unterminated object")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] != '}' {
			return c.fail("expected ',' or '}' in object")
		}
		c.pos++
		break
	}
	sorted := slices.IsSortedFunc(members, compareMembers)
	if !sorted {
		slices.SortFunc(members, compareMembers)
	}
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return c.fail("duplicate key %q", members[i].key)
		}
	}
	// Rewrite the members in sorted order behind an opening brace.
	c.scratch = append(c.scratch[:0], c.out[begin:]...)
	c.out = append(c.out[:begin], '{')
	for i, m := range members {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.scratch[m.start-begin:m.end-begin]...)
	}
	c.out = append(c.out, '}')
	return nil
}

// compareMembers orders keys by UTF-16 code units (RFC 8785 §3.2.3). For
// keys without characters above U+FFFF that is byte order.
func compareMembers(a, b member) int {
	if ascii(a.key) && ascii(b.key) {
		return cmpStrings(a.key, b.key)
	}
	ua, ub := utf16.Encode([]rune(a.key)), utf16.Encode([]rune(b.key))
	return slices.Compare(ua, ub)
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func (c *canon) array(depth int) error {
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.ws()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for i := 0; ; i++ {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.ws()
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.ws()
		if c.pos >= len(c.in) {
			return c.fail("unterminated array")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] != ']' {
			return c.fail("expected ',' or ']' in array")
		}
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
}

// str reads a JSON string and writes it escaped as RFC 8785 §3.2.2.2 asks:
// only '"', '\\' and control characters, with the short forms JSON has.
func (c *canon) str() error {
	c.pos++ // opening quote
	c.out = append(c.out, '"')
	for c.pos < len(c.in) {
		b := c.in[c.pos]
		switch {
		case b == '"':
			c.pos++
			c.out = append(c.out, '"')
			return nil
		case b < 0x20:
			return c.fail("control character in string")
		case b != '\\':
			c.out = append(c.out, b)
			c.pos++
			continue
		}
		if c.pos+1 >= len(c.in) {
			return c.fail("unterminated escape")
		}
		esc := c.in[c.pos+1]
		c.pos += 2
		var r rune
		switch esc {
		case '"', '\\', '/':
			r = rune(esc)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			var err error
			if r, err = c.unicodeEscape(); err != nil {
				return err
			}
		default:
			return c.fail("invalid escape \\%c", esc)
		}
		c.out = appendRune(c.out, r)
	}
	return c.fail("unterminated string")
}

// unicodeEscape reads the hex of a \u escape and, for a high surrogate, a
// following low surrogate's. A lone surrogate is an error: it is not
// I-JSON (RFC 7493 §2.1), RFC 8785 refuses it, and were it read as U+FFFD
// (as encoding/json does) bodies that differ would share an identity.
func (c *canon) unicodeEscape() (rune, error) {
	at := c.pos - 2
	r1, ok := c.hex4()
	if !ok {
		return 0, c.fail("invalid \\u escape")
	}
	if !utf16.IsSurrogate(r1) {
		return r1, nil
	}
	if c.pos+5 < len(c.in) && c.in[c.pos] == '\\' && c.in[c.pos+1] == 'u' {
		c.pos += 2
		if r2, ok := c.hex4(); ok {
			if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
				return r, nil
			}
		}
	}
	c.pos = at
	return 0, c.fail("lone UTF-16 surrogate \\u%04x", r1)
}

func (c *canon) hex4() (rune, bool) {
	if c.pos+4 > len(c.in) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(c.in[c.pos:c.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	c.pos += 4
	return rune(v), true
}

func appendRune(out []byte, r rune) []byte {
	switch r {
	case '"':
		return append(out, '\\', '"')
	case '\\':
		return append(out, '\\', '\\')
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(out, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
	}
	return utf8.AppendRune(out, r)
}

// number reads a JSON number and writes its ECMAScript form. An integer
// literal that float64 holds exactly is copied (stripped of a minus zero);
// anything else goes through float64.
func (c *canon) number() error {
	start := c.pos
	if c.in[c.pos] == '-' {
		c.pos++
	}
	digits := c.pos
	for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
		c.pos++
	}
	if c.pos == digits || (c.in[digits] == '0' && c.pos-digits > 1) {
		return c.fail("invalid number")
	}
	integer := true
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		integer = false
		c.pos++
		f := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		if c.pos == f {
			return c.fail("invalid number")
		}
	}
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		integer = false
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		e := c.pos
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
		}
		if c.pos == e {
			return c.fail("invalid number")
		}
	}
	lit := c.in[start:c.pos]
	if integer && c.pos-digits <= 15 { // below 2^53: exact in float64
		if string(lit) == "-0" {
			c.out = append(c.out, '0')
		} else {
			c.out = append(c.out, lit...)
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return c.fail("number %s is outside IEEE 754 double range", lit)
	}
	c.out = append(c.out, FormatES6(f)...)
	return nil
}
