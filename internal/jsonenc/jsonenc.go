// Package jsonenc appends JSON values to a byte slice exactly as a
// reference encoder writes them — encoding/json, or log/slog's JSON
// handler — for the few hot paths that write known shapes without
// reflection (a receipt, an access-log line: docs/performance.md). The
// packages that use it hold their output to the reference encoder's
// with property tests.
package jsonenc

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Style is whose escaping a string follows.
type Style uint8

const (
	// Std is encoding/json's: <, > and & escaped as \u003c…, \b and \f
	// as short escapes.
	Std Style = iota
	// Slog is log/slog's JSON handler's: HTML characters left alone, \b
	// and \f as \u0008 and \u000c.
	Slog
	// Wire is Slog's, with U+2028 and U+2029 left as they are too: what
	// the gateway writes into the answers it encodes for clients, as the
	// providers' own streams do.
	Wire
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a quoted JSON string in style st: invalid
// UTF-8 as U+FFFD, and (but in style Wire) U+2028 and U+2029 escaped, as
// both reference encoders do.
func AppendString(b []byte, s string, st Style) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (st != Std || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch {
			case c == '\\' || c == '"':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b' && st == Std:
				b = append(b, '\\', 'b')
			case c == '\f' && st == Std:
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if (r == '\u2028' || r == '\u2029') && st != Wire {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendFloat appends a finite f as encoding/json writes it (ECMAScript's
// shortest form: exponents from 1e21 and below 1e-6, written e-7 not
// e-07); ok is false, and b unchanged, for NaN and the infinities, which
// JSON cannot hold.
func AppendFloat(b []byte, f float64) (_ []byte, ok bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
