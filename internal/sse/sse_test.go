package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func readAll(t *testing.T, in string) ([]Event, error) {
	t.Helper()
	r := NewReader(strings.NewReader(in), 1<<10)
	var out []Event
	for {
		ev, err := r.Next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev)
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Event
		err  error
	}{
		{"openai chunks", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []Event{{Data: []byte(`{"a":1}`)}, {Data: []byte("[DONE]")}}, nil},
		{"anthropic typed events", "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: message_stop\ndata: {}\n\n",
			[]Event{{Type: "ping", Data: []byte(`{"type":"ping"}`)}, {Type: "message_stop", Data: []byte(`{}`)}}, nil},
		{"comments and CRLF", ": keep-alive\r\n\r\ndata:x\r\n\r\n", []Event{{Data: []byte("x")}}, nil},
		{"bare CR line endings", "data: a\rdata: b\r\r", []Event{{Data: []byte("a\nb")}}, nil},
		{"multi-line data", "data: a\ndata: b\n\n", []Event{{Data: []byte("a\nb")}}, nil},
		{"event with no data is not dispatched", "event: x\n\ndata: y\n\n", []Event{{Data: []byte("y")}}, nil},
		{"id and unknown fields", "id: 7\nretry: 10\nfoo: bar\ndata: z\n\n", []Event{{ID: "7", Data: []byte("z")}}, nil},
		{"no space after colon", "data:{}\n\n", []Event{{Data: []byte("{}")}}, nil},
		{"cut inside an event", "data: {\"a\":1}\n\ndata: {\"b\"", []Event{{Data: []byte(`{"a":1}`)}}, io.ErrUnexpectedEOF},
		{"cut after a field line", "data: x\n", nil, io.ErrUnexpectedEOF},
		{"oversized", "data: " + strings.Repeat("x", 2000) + "\n\n", nil, ErrTooLarge},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d events %q, want %d", len(got), got, len(tc.want))
			}
			for i := range got {
				if got[i].Type != tc.want[i].Type || got[i].ID != tc.want[i].ID || !bytes.Equal(got[i].Data, tc.want[i].Data) {
					t.Errorf("event %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// An event several times the reader's buffer is assembled whole.
func TestEventsLongerThanTheBuffer(t *testing.T) {
	long := strings.Repeat("y", 3*4096+17)
	r := NewReader(strings.NewReader("data: "+long+"\r\n\r\ndata: z\n\n"), 64<<10)
	for _, want := range []string{long, "z"} {
		ev, err := r.Next()
		if err != nil || string(ev.Data) != want {
			t.Fatalf("got %d bytes, %v; want %d bytes", len(ev.Data), err, len(want))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last event: %v", err)
	}
}

func TestWriteThenRead(t *testing.T) {
	var b []byte
	b = AppendEvent(b, "message_start", []byte("{\"x\":\n1}"))
	b = AppendComment(b, "oncegate resuming\nafter_tokens=4")
	b = AppendEvent(b, "", []byte("[DONE]"))
	got, err := readAll(t, string(b))
	if err != nil || len(got) != 2 || got[0].Type != "message_start" || string(got[0].Data) != "{\"x\":\n1}" || string(got[1].Data) != "[DONE]" {
		t.Fatalf("round trip: %q %v", got, err)
	}
	if !bytes.Contains(b, []byte(": oncegate resumingafter_tokens=4\n\n")) {
		t.Fatalf("comment must stay on one line: %q", b)
	}
}

// FuzzReader: arbitrary bytes never panic, events stay within the limit,
// and what the writer writes the reader reads back.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: b\n\n"), "t", []byte("d"))
	f.Add([]byte("data: [DONE]\r\n\r\n: c\n"), "", []byte("x\ny"))
	f.Add([]byte("\r\r\n\n:\ndata"), "e", []byte(""))
	f.Fuzz(func(t *testing.T, in []byte, typ string, data []byte) {
		r := NewReader(bytes.NewReader(in), 256)
		for i := 0; i < 10000; i++ {
			ev, err := r.Next()
			if err != nil {
				break
			}
			if len(ev.Data) > 256 {
				t.Fatalf("event of %d bytes past the limit", len(ev.Data))
			}
		}
		if strings.ContainsAny(typ, "\r\n") || bytes.ContainsRune(data, '\r') {
			return
		}
		wire := AppendEvent(nil, typ, data)
		ev, err := NewReader(bytes.NewReader(wire), 1<<20).Next()
		if err != nil || ev.Type != typ || !bytes.Equal(ev.Data, data) {
			t.Fatalf("round trip of (%q, %q): %+v %v", typ, data, ev, err)
		}
	})
}

// A released reader's buffer serves the next reader, with nothing of the
// first stream left in it, and the events read before stay whole.
func TestReleasedBufferServesTheNextReader(t *testing.T) {
	r := NewReader(strings.NewReader("data: one\n\ndata: left over in the buffer\n\n"), 64<<10)
	ev, err := r.Next()
	if err != nil || string(ev.Data) != "one" {
		t.Fatalf("first stream: %q %v", ev.Data, err)
	}
	r.Release()
	r.Release() // a second one does nothing
	r2 := NewReader(strings.NewReader("data: two\n\n"), 64<<10)
	defer r2.Release()
	ev2, err := r2.Next()
	if err != nil || string(ev2.Data) != "two" {
		t.Fatalf("second stream: %q %v", ev2.Data, err)
	}
	if _, err := r2.Next(); err != io.EOF {
		t.Fatalf("second stream, after its event: %v", err)
	}
	if string(ev.Data) != "one" {
		t.Fatalf("an event read before the release changed: %q", ev.Data)
	}
}

// NextView reads what Next reads; its data is the reader's own buffer,
// so an event read by Next stays whole while a view does not outlive the
// next call.
func TestNextViewIsNextWithoutACopy(t *testing.T) {
	in := "event: a\ndata: first\n\n: keep-alive\ndata: second, longer\ndata: two lines\n\nid: 7\ndata: third\n\n"
	byNext, byView := NewReader(strings.NewReader(in), 1<<10), NewReader(strings.NewReader(in), 1<<10)
	var kept []Event
	for {
		want, errNext := byNext.Next()
		got, errView := byView.NextView()
		if errNext != errView {
			t.Fatalf("Next: %v, NextView: %v", errNext, errView)
		}
		if errNext != nil {
			break
		}
		if got.Type != want.Type || got.ID != want.ID || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("NextView read %+v, Next %+v", got, want)
		}
		kept = append(kept, want)
	}
	if len(kept) != 3 || string(kept[0].Data) != "first" || string(kept[1].Data) != "second, longer\ntwo lines" {
		t.Fatalf("events read by Next changed: %q", kept)
	}
}
