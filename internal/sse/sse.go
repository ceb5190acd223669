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
	"sync"
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
	rest     []byte // the part of a line after a bare CR
	// Comments counts comment lines (": keep-alive") seen so far.
	Comments int
}

// NewReader reads events from r; maxEvent bounds one event's bytes.
// Its buffer is bufio's default 4 KiB, held for as long as the stream is
// open: a longer line is assembled from several reads, so a larger buffer
// would only cost every open stream its size (docs/performance.md). It
// comes from a pool: Release gives it back when the stream is over, so
// that a stream leaves no garbage buffer behind.
func NewReader(r io.Reader, maxEvent int) *Reader {
	br, _ := buffers.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReader(r)
	} else {
		br.Reset(r)
	}
	return &Reader{br: br, maxEvent: maxEvent}
}

// buffers holds the read buffers of finished streams.
var buffers sync.Pool

// Release gives the reader's buffer back for another stream's reader.
// The reader must not be used again; a second Release does nothing.
func (r *Reader) Release() {
	if r.br == nil {
		return
	}
	r.br.Reset(nil) // let go of the body it read
	buffers.Put(r.br)
	r.br = nil
}

// Next returns the next event with data. It returns io.EOF when the stream
// ends cleanly between events and io.ErrUnexpectedEOF when it ends inside
// one (the last event was never dispatched by a blank line).
func (r *Reader) Next() (Event, error) {
	ev, err := r.NextView()
	if err == nil {
		ev.Data = append([]byte(nil), ev.Data...)
	}
	return ev, err
}

// NextView is Next without a copy of the event's data: Data is the
// reader's own buffer, valid only until the next call. A decoder that
// keeps nothing of it saves a copy of every event (docs/performance.md,
// Memory).
func (r *Reader) NextView() (Event, error) {
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
				ev.Data = r.data.Bytes()
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
			ev.Type = eventType(value)
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

// eventType is an event's type: one of the names the providers send on
// every event without allocating it again (Anthropic and the Responses
// API name each one).
func eventType(name []byte) string {
	switch string(name) {
	case "content_block_delta":
		return "content_block_delta"
	case "content_block_start":
		return "content_block_start"
	case "content_block_stop":
		return "content_block_stop"
	case "message_start":
		return "message_start"
	case "message_delta":
		return "message_delta"
	case "message_stop":
		return "message_stop"
	case "ping":
		return "ping"
	case "response.output_text.delta":
		return "response.output_text.delta"
	}
	return string(name)
}

// Pending reports whether the next event may already be buffered, so
// that a relay can batch what arrived together into one flush.
func (r *Reader) Pending() bool { return r.br.Buffered() > 0 || len(r.rest) > 0 }

// readLine returns one line without its terminator (LF, CRLF or CR). The
// returned slice is valid until the next call.
func (r *Reader) readLine() ([]byte, error) {
	if len(r.rest) > 0 {
		return r.splitCR(r.rest), nil
	}
	r.line = r.line[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.line = append(r.line, chunk...)
		if len(r.line) > r.maxEvent+2 {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrTooLarge, r.maxEvent)
		}
		switch {
		case err == nil:
			line := r.line[:len(r.line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1] // CRLF
			}
			return r.splitCR(line), nil
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(r.line) > 0:
			if bytes.IndexByte(r.line, '\r') >= 0 { // complete CR-terminated lines before the cut
				if line := r.splitCR(r.line); len(r.rest) > 0 || r.line[len(r.line)-1] == '\r' {
					return line, nil
				}
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// splitCR handles the bare-CR line ending: it returns the text before the
// first CR and keeps the rest for the next readLine.
func (r *Reader) splitCR(line []byte) []byte {
	i := bytes.IndexByte(line, '\r')
	if i < 0 {
		r.rest = nil
		return line
	}
	r.rest = line[i+1:]
	if len(r.rest) == 0 {
		r.rest = nil
	}
	return line[:i]
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
