package identity

// The reference implementation: the straightforward, Token-based RFC 8785
// canonicalizer. Tests check the fast one against it on every input.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

func refCanonicalize(doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) {
		return nil, fmt.Errorf("%w: invalid UTF-8", ErrNotCanonicalizable)
	}
	if refLoneSurrogate(doc) {
		return nil, fmt.Errorf("%w: lone UTF-16 surrogate", ErrNotCanonicalizable)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(doc))
	if err := refValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the document", ErrNotCanonicalizable)
	}
	return out.Bytes(), nil
}

func refValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrNotCanonicalizable, maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			return refObject(dec, out, depth)
		}
		if t == '[' {
			return refArray(dec, out, depth)
		}
		return fmt.Errorf("%w: unexpected %q", ErrNotCanonicalizable, t)
	case string:
		refWriteString(out, t)
	case json.Number:
		s, err := refFormatNumber(string(t))
		if err != nil {
			return err
		}
		out.WriteString(s)
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

type refMember struct {
	key   string
	units []uint16
	value []byte
}

func refObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	var members []refMember
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%w: object key is not a string", ErrNotCanonicalizable)
		}
		if seen[key] {
			return fmt.Errorf("%w: duplicate key %q", ErrNotCanonicalizable, key)
		}
		seen[key] = true
		var v bytes.Buffer
		if err := refValue(dec, &v, depth+1); err != nil {
			return err
		}
		members = append(members, refMember{key: key, units: utf16.Encode([]rune(key)), value: v.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	sort.Slice(members, func(i, j int) bool { return refLessUTF16(members[i].units, members[j].units) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		refWriteString(out, m.key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

func refArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := refValue(dec, out, depth+1); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	out.WriteByte(']')
	return nil
}

func refLessUTF16(a, b []uint16) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// writeString escapes as RFC 8785 §3.2.2.2: only '"', '\\' and control
// characters, with the short forms where JSON has them.
func refWriteString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
			} else {
				out.WriteRune(r)
			}
		}
	}
	out.WriteByte('"')
}

// formatNumber renders a JSON number as ECMAScript's Number.prototype.toString
// does (RFC 8785 §3.2.2.3).
func refFormatNumber(lit string) (string, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("%w: number %s is outside IEEE 754 double range", ErrNotCanonicalizable, lit)
	}
	return FormatES6(f), nil
}

// refLoneSurrogate reports whether a string of doc escapes a surrogate
// that is not half of a pair (encoding/json would read it as U+FFFD).
func refLoneSurrogate(doc []byte) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		switch {
		case !inString:
			inString = doc[i] == '"'
		case doc[i] == '"':
			inString = false
		case doc[i] == '\\' && i+1 < len(doc) && doc[i+1] == 'u' && i+6 <= len(doc):
			r1, err := strconv.ParseUint(string(doc[i+2:i+6]), 16, 32)
			i += 5
			if err != nil || !utf16.IsSurrogate(rune(r1)) {
				continue
			}
			if i+7 <= len(doc) && doc[i+1] == '\\' && doc[i+2] == 'u' {
				if r2, err := strconv.ParseUint(string(doc[i+3:i+7]), 16, 32); err == nil &&
					utf16.DecodeRune(rune(r1), rune(r2)) != utf8.RuneError {
					i += 6
					continue
				}
			}
			return true
		case doc[i] == '\\':
			i++ // an escaped character
		}
	}
	return false
}
