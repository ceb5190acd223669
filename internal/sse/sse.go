// Package sse reads and writes Server-Sent Events (the WHATWG "text/event-
// stream" format) as the OpenAI and Anthropic streaming APIs use them. The
// reader treats its input as untrusted: lines and events are bounded, and
// malformed input yields an error rather than a panic.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one dispatched event. Data has the "data:" lines joined by "\n",
// without the trailing newline.
type Event struct {
	Type string
	Data []byte
	ID   string
}

// ErrTooLarge reports a line or event above the reader's limit.
var ErrTooLarge = errors.New("sse: event too large")

// Reader parses events from a stream. It is not safe for concurrent use.
type Reader struct {
	br       *bufio.Reader
	maxEvent int
	data     bytes.Buffer
	line     []byte
	// Comments counts comment lines (": keep-alive") seen so far.
	Comments int
}

// NewReader reads events from r; maxEvent bounds one event's bytes.
func NewReader(r io.Reader, maxEvent int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), maxEvent: maxEvent}
}

// Next returns the next event with data. It returns io.EOF when the stream
// ends cleanly between events and io.ErrUnexpectedEOF when it ends inside
// one (the last event was never dispatched by a blank line).
func (r *Reader) Next() (Event, error) {
	var ev Event
	r.data.Reset()
	hasData := false
	pending := false // any field line seen since the last dispatch
	for {
		line, err := r.readLine()
		if err != nil {
			if err == io.EOF && pending {
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				ev.Data = append([]byte(nil), r.data.Bytes()...)
				return ev, nil
			}
			ev, pending = Event{}, false // an event with no data is not dispatched
			continue
		}
		if line[0] == ':' {
			r.Comments++
			continue
		}
		pending = true
		name, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "event":
			ev.Type = string(value)
		case "data":
			if hasData {
				r.data.WriteByte('\n')
			}
			r.data.Write(value)
			hasData = true
			if r.data.Len() > r.maxEvent {
				return Event{}, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, r.maxEvent)
			}
		case "id":
			if !bytes.ContainsRune(value, 0) {
				ev.ID = string(value)
			}
		}
		// "retry" and unknown fields are ignored, as the spec requires.
	}
}

// readLine returns one line without its terminator (LF, CRLF or CR).
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		b, err := r.br.ReadByte()
		if err != nil {
			if err == io.EOF && len(r.line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		switch b {
		case '\n':
			return r.line, nil
		case '\r':
			if next, err := r.br.Peek(1); err == nil && next[0] == '\n' {
				_, _ = r.br.ReadByte()
			}
			return r.line, nil
		}
		r.line = append(r.line, b)
		if len(r.line) > r.maxEvent {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrTooLarge, r.maxEvent)
		}
	}
}

// AppendEvent appends one event in wire form: an optional "event:" line,
// the data (one "data:" line per line of data) and the blank line.
func AppendEvent(dst []byte, typ string, data []byte) []byte {
	if typ != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, typ...)
		dst = append(dst, '\n')
	}
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(dst, '\n')
}

// AppendComment appends a comment line, which every SSE client ignores.
func AppendComment(dst []byte, text string) []byte {
	dst = append(dst, ": "...)
	for i := 0; i < len(text); i++ {
		if c := text[i]; c != '\n' && c != '\r' {
			dst = append(dst, c)
		}
	}
	return append(dst, "\n\n"...)
}
