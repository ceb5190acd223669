package logline

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// field is one generated field, written both ways.
type field struct {
	key  string
	kind int // 0 string, 1 int, 2 float
	s    string
	i    int64
	f    float64
}

// A line is byte for byte what slog's own handler writes for the same
// record, in both formats, whatever the strings hold (quotes, control
// characters, invalid UTF-8, separators) and whatever the numbers are.
func TestLinesAreWhatSlogWrites(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		format := rapid.SampledFrom([]string{"json", "text"}).Draw(t, "format")
		level := rapid.SampledFrom([]slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}).Draw(t, "level")
		at := time.Unix(rapid.Int64Range(0, 4102444800).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec"))
		if rapid.Bool().Draw(t, "local") {
			at = at.In(time.FixedZone("x", rapid.IntRange(-12, 12).Draw(t, "zone")*3600))
		}
		text := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z_=" \\\n\t\x00\x7f]{0,12}`),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }))
		msg := text.Draw(t, "msg")
		fields := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) field {
			f := field{key: text.Draw(t, "key"), kind: rapid.IntRange(0, 2).Draw(t, "kind")}
			switch f.kind {
			case 0:
				f.s = text.Draw(t, "s")
			case 1:
				f.i = rapid.Int64().Draw(t, "i")
			default:
				f.f = rapid.OneOf(rapid.Float64(), rapid.Float64Range(-1e-5, 1e-5),
					rapid.SampledFrom([]float64{0, 1e21, 1e-7, 123.456, -0.5, 1e20})).Draw(t, "f")
			}
			return f
		}), 0, 20).Draw(t, "fields")

		var want, got bytes.Buffer
		opts := &slog.HandlerOptions{Level: slog.LevelDebug}
		var h slog.Handler = slog.NewJSONHandler(&want, opts)
		if format == "text" {
			h = slog.NewTextHandler(&want, opts)
		}
		r := slog.NewRecord(at, level, msg, 0)
		w := New(&got, format, slog.LevelDebug)
		l := w.Begin(at, level, msg)
		for _, f := range fields {
			switch f.kind {
			case 0:
				r.AddAttrs(slog.String(f.key, f.s))
				l.String(f.key, f.s)
			case 1:
				r.AddAttrs(slog.Int64(f.key, f.i))
				l.Int(f.key, f.i)
			default:
				r.AddAttrs(slog.Float64(f.key, f.f))
				l.Float(f.key, f.f)
			}
		}
		if err := h.Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		l.Write()
		if got.String() != want.String() {
			t.Fatalf("logline wrote\n%q\nslog writes\n%q", got.String(), want.String())
		}
	})
}

// What JSON cannot hold is written as null, so that a line stays JSON.
func TestNonFiniteNumbersStayJSON(t *testing.T) {
	var b bytes.Buffer
	l := New(&b, "json", nil).Begin(time.Unix(0, 0).UTC(), slog.LevelInfo, "request")
	l.Float("a", math.NaN())
	l.Float("b", math.Inf(-1))
	l.Write()
	if !strings.HasSuffix(b.String(), `"a":null,"b":null}`+"\n") {
		t.Fatalf("got %s", b.String())
	}
}

// Below its level a writer is not enabled; a writer made for another
// logger's handler asks that handler, and its lines reach it.
func TestLevelsAndHandlers(t *testing.T) {
	w := New(&bytes.Buffer{}, "json", slog.LevelWarn)
	if w.Enabled(slog.LevelInfo) || !w.Enabled(slog.LevelError) {
		t.Fatal("a writer at WARN: INFO must be off, ERROR on")
	}
	if Discard.Enabled(slog.LevelError) {
		t.Fatal("Discard is never enabled")
	}
	var b bytes.Buffer
	hw := ForHandler(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if hw.Enabled(slog.LevelDebug) || !hw.Enabled(slog.LevelInfo) {
		t.Fatal("a handler's writer follows the handler's level")
	}
	l := hw.Begin(time.Unix(0, 0), slog.LevelInfo, "request")
	l.String("path", "/v1/chat/completions")
	l.Int("status", 200)
	l.Float("cost_usd", 0.25)
	l.Write()
	if !strings.Contains(b.String(), "msg=request path=/v1/chat/completions status=200 cost_usd=0.25") {
		t.Fatalf("got %s", b.String())
	}
}

// The access log's line, as the gateway writes it: the cost the
// benchmark compares with slog's.
func BenchmarkLine(b *testing.B) {
	for _, format := range []string{"json", "text"} {
		b.Run("logline/"+format, func(b *testing.B) {
			w := New(discard{}, format, slog.LevelInfo)
			b.ReportAllocs()
			for b.Loop() {
				l := w.Begin(time.Now(), slog.LevelInfo, "request")
				accessFields(func(k, v string) { l.String(k, v) }, l.Int, l.Float)
				l.Write()
			}
		})
		b.Run("slog/"+format, func(b *testing.B) {
			var h slog.Handler = slog.NewJSONHandler(discard{}, nil)
			if format == "text" {
				h = slog.NewTextHandler(discard{}, nil)
			}
			log := slog.New(h)
			b.ReportAllocs()
			for b.Loop() {
				attrs := make([]slog.Attr, 0, 20)
				accessFields(func(k, v string) { attrs = append(attrs, slog.String(k, v)) },
					func(k string, v int64) { attrs = append(attrs, slog.Int64(k, v)) },
					func(k string, v float64) { attrs = append(attrs, slog.Float64(k, v)) })
				log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
			}
		})
	}
}

// accessFields are a typical access-log line's fields.
func accessFields(s func(k, v string), i func(k string, v int64), f func(k string, v float64)) {
	s("method", "POST")
	s("path", "/v1/chat/completions")
	i("status", 200)
	f("latency_ms", 1.234)
	s("request_id", "019ad7c2-5c1e-7f3a-9d7e-3c2b1a0f9e8d")
	s("tenant", "acme")
	s("model", "chat")
	s("dedup", "miss")
	s("routes", "primary")
	i("attempts", 1)
	i("tokens", 57)
	f("cost_usd", 0.000123)
	s("terminal", "succeeded")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
