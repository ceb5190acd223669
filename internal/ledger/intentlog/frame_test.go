package intentlog

import (
	"bytes"
	"errors"
	"testing"
)

func TestReadFrame(t *testing.T) {
	frame := AppendFrame(nil, []byte("hello"))
	long := AppendFrame(nil, bytes.Repeat([]byte("x"), 300))
	tests := []struct {
		name string
		b    []byte
		rec  string
		err  error
	}{
		{"a frame", frame, "hello", nil},
		{"a frame and more", append(bytes.Clone(frame), long...), "hello", nil},
		{"nothing", nil, "", ErrTorn},
		{"half a header", frame[:5], "", ErrTorn},
		{"a header alone", frame[:headerSize], "", ErrTorn},
		{"a record cut short", long[:len(long)-1], "", ErrTorn},
		{"an empty record", AppendFrame(nil, nil), "", ErrCorrupt},
		{"zeros", make([]byte, 32), "", ErrCorrupt},
		{"a length past MaxRecord", []byte{1, 0, 0, 2, 0, 0, 0, 0}, "", ErrCorrupt},
		{"a changed checksum", func() []byte { b := bytes.Clone(frame); b[4]++; return b }(), "", ErrCorrupt},
		{"a changed record", func() []byte { b := bytes.Clone(frame); b[headerSize]++; return b }(), "", ErrCorrupt},
		// A shorter length over the same bytes fails the checksum, which
		// covers the length too.
		{"a shorter length", func() []byte { b := bytes.Clone(frame); b[0]--; return b }(), "", ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, n, err := ReadFrame(tt.b)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if err == nil && (string(rec) != tt.rec || n != headerSize+len(tt.rec)) {
				t.Fatalf("read %q (%d bytes), want %q", rec, n, tt.rec)
			}
		})
	}
}

// FuzzReadFrame: whatever the bytes, ReadFrame neither panics nor reads
// past them, and a frame it accepts is exactly the frame of its record.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []byte("hello")))
	f.Add(AppendFrame(AppendFrame(nil, []byte("a")), []byte("bc")))
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 'h'})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, n, err := ReadFrame(b)
		if err != nil {
			if !errors.Is(err, ErrTorn) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unexpected error %v", err)
			}
			if len(b) > 0 {
				// A record made of the same bytes frames and reads back.
				r, m, err := ReadFrame(AppendFrame(nil, b[:min(len(b), MaxRecord)]))
				if err != nil || m != headerSize+min(len(b), MaxRecord) || !bytes.Equal(r, b[:min(len(b), MaxRecord)]) {
					t.Fatalf("a frame of %d bytes did not read back: %v", len(b), err)
				}
			}
			return
		}
		if n > len(b) || n != headerSize+len(rec) || len(rec) == 0 {
			t.Fatalf("read %d bytes of %d, record of %d", n, len(b), len(rec))
		}
		if !bytes.Equal(AppendFrame(nil, rec), b[:n]) {
			t.Fatal("accepted a frame that is not its record's")
		}
	})
}
