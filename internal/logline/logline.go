// Package logline writes log lines that are known in advance — a
// gateway's access log, one line per request — without log/slog's work
// per attribute: the line is appended to one reused buffer, field by
// field, in exactly the bytes slog's JSON or text handler would write
// for the same record (docs/operations.md, "Logs"), and handed to the
// writer in one call. slog builds a record, walks its attributes through
// interfaces and asks the runtime for the caller on every line; for the
// access log that was about a twentieth of a request's CPU
// (docs/performance.md).
package logline

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncegate/oncegate/internal/jsonenc"
)

// Writer writes lines in one format to one destination, at or above one
// level. Safe for concurrent use.
type Writer struct {
	out   io.Writer
	json  bool
	level slog.Leveler
	// handler, when set, receives each line as a slog record instead (a
	// logger whose handler is not one of slog's own: tests, libraries).
	handler slog.Handler
}

// New writes lines to out as slog.NewJSONHandler (format "json") or
// slog.NewTextHandler (format "text") with Level level would.
func New(out io.Writer, format string, level slog.Leveler) *Writer {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Writer{out: out, json: format != "text", level: level}
}

// ForHandler sends each line to h as a slog record: the slow way, for a
// logger made elsewhere.
func ForHandler(h slog.Handler) *Writer { return &Writer{handler: h} }

// Discard writes nothing.
var Discard = &Writer{handler: slog.DiscardHandler}

// Enabled reports whether a line at level would be written.
func (w *Writer) Enabled(level slog.Level) bool {
	if w.handler != nil {
		return w.handler.Enabled(context.Background(), level)
	}
	return level >= w.level.Level()
}

// Line is one line being written. Begin it, add its fields, then Write
// it; it must not be used after.
type Line struct {
	w     *Writer
	buf   []byte
	level slog.Level
	msg   string
	at    time.Time
	attrs []slog.Attr // ForHandler's lines only
}

var lines = sync.Pool{New: func() any { return &Line{buf: make([]byte, 0, 512)} }}

// Begin starts a line at level with message msg, stamped at.
func (w *Writer) Begin(at time.Time, level slog.Level, msg string) *Line {
	l := lines.Get().(*Line)
	l.w, l.level, l.msg, l.at = w, level, msg, at.Round(0)
	l.buf, l.attrs = l.buf[:0], l.attrs[:0]
	if w.handler != nil {
		return l
	}
	if w.json {
		l.buf = append(l.buf, `{"time":"`...)
		l.buf = l.at.AppendFormat(l.buf, time.RFC3339Nano)
		l.buf = append(l.buf, `","level":`...)
	} else {
		l.buf = append(l.buf, "time="...)
		l.buf = appendRFC3339Millis(l.buf, l.at)
		l.buf = append(l.buf, " level="...)
	}
	l.value(level.String())
	l.key("msg")
	l.value(msg)
	return l
}

// key appends a field's key and its separators.
func (l *Line) key(k string) {
	if l.w.json {
		l.buf = append(l.buf, ',')
	} else {
		l.buf = append(l.buf, ' ')
	}
	l.value(k)
	if l.w.json {
		l.buf = append(l.buf, ':')
	} else {
		l.buf = append(l.buf, '=')
	}
}

// value appends a string as slog writes one: a JSON string, or in text
// bare unless it needs quoting.
func (l *Line) value(s string) {
	switch {
	case l.w.json:
		l.buf = jsonenc.AppendString(l.buf, s, jsonenc.Slog)
	case needsQuoting(s):
		l.buf = strconv.AppendQuote(l.buf, s)
	default:
		l.buf = append(l.buf, s...)
	}
}

// String adds a string field.
func (l *Line) String(k, v string) {
	if l.w.handler != nil {
		l.attrs = append(l.attrs, slog.String(k, v))
		return
	}
	l.key(k)
	l.value(v)
}

// Int adds an integer field.
func (l *Line) Int(k string, v int64) {
	if l.w.handler != nil {
		l.attrs = append(l.attrs, slog.Int64(k, v))
		return
	}
	l.key(k)
	l.buf = strconv.AppendInt(l.buf, v, 10)
}

// Float adds a number field. NaN and the infinities, which JSON cannot
// hold, are written as null in JSON (slog writes an error there instead).
func (l *Line) Float(k string, v float64) {
	if l.w.handler != nil {
		l.attrs = append(l.attrs, slog.Float64(k, v))
		return
	}
	l.key(k)
	if !l.w.json {
		l.buf = strconv.AppendFloat(l.buf, v, 'g', -1, 64)
		return
	}
	var ok bool
	if l.buf, ok = jsonenc.AppendFloat(l.buf, v); !ok {
		l.buf = append(l.buf, "null"...)
	}
}

// Write ends the line and writes it in one call; the line is recycled.
func (l *Line) Write() {
	w := l.w
	if w.handler != nil {
		r := slog.NewRecord(l.at, l.level, l.msg, 0)
		r.AddAttrs(l.attrs...)
		_ = w.handler.Handle(context.Background(), r)
	} else {
		if w.json {
			l.buf = append(l.buf, '}')
		}
		l.buf = append(l.buf, '\n')
		_, _ = w.out.Write(l.buf) // a log has nowhere to report its own failure
	}
	l.w = nil
	if cap(l.buf) <= 64<<10 {
		lines.Put(l)
	}
}

// appendRFC3339Millis writes t as slog's text handler does: RFC 3339
// with exactly three digits of milliseconds.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the fourth digit
}

// needsQuoting reports whether slog's text handler quotes s.
func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c != '\\' && (c == ' ' || c == '=' || c < 0x20 || c == '"') {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
