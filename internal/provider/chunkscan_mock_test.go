package provider_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/sse"
)

// These run the OpenAI stream decoder on the streams of internal/mock,
// whose chunks are written from the API reference (with Go's sorted keys,
// and Azure OpenAI's content filter results).

const (
	textRequest = `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Explain receipts."}]}`
	toolRequest = `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Look it up."}],` +
		`"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}],"tool_choice":"required"}`
	logprobsRequest = `{"model":"gpt-4o","stream":true,"logprobs":true,"messages":[{"role":"user","content":"Explain receipts."}]}`
	azurePath       = "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
)

// mockStream is the body of the mock's answer to a streamed request.
func mockStream(t testing.TB, cfg mock.Config, path, body string) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("api-key", mock.DefaultAzureAPIKey)
	rec := httptest.NewRecorder()
	mock.New(cfg).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !bytes.HasPrefix(rec.Body.Bytes(), []byte("data: ")) {
		t.Fatalf("mock answered %d: %s", rec.Code, rec.Body.Bytes())
	}
	return rec.Body.Bytes()
}

// Every chunk of the mock's text, tool call and Azure streams is read in
// one pass, as encoding/json reads it; a chunk with log probabilities is
// left to encoding/json.
func TestChunkScanReadsTheMocksStreams(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, path, body string
		scanned          bool
	}{
		{"text", "/v1/chat/completions", textRequest, true},
		{"tool call", "/v1/chat/completions", toolRequest, true},
		{"azure", azurePath, textRequest, true},
		{"logprobs", "/v1/chat/completions", logprobsRequest, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := mockStream(t, mock.Config{Tokens: 12}, c.path, c.body)
			rd := sse.NewReader(bytes.NewReader(body), provider.MaxEventBytes)
			started, texts := false, 0
			for {
				ev, err := rd.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if string(ev.Data) == "[DONE]" {
					continue
				}
				want, err := provider.DecodeChunk(ev.Data, started)
				if err != nil {
					t.Fatalf("%s: %v", ev.Data, err)
				}
				got, ok := provider.ScanChunk(ev.Data, started)
				isText := bytes.Contains(ev.Data, []byte(`"content":"`)) && !bytes.Contains(ev.Data, []byte(`"content":""`))
				if isText {
					texts++
				}
				switch {
				case ok && !reflect.DeepEqual(got, want):
					t.Fatalf("scanned %+v, encoding/json reads %+v: %s", got, want, ev.Data)
				case !ok && (c.scanned || !isText):
					t.Fatalf("declined %s", ev.Data)
				case ok && !c.scanned && isText:
					t.Fatalf("scanned a chunk with log probabilities: %s", ev.Data)
				}
				started = true
			}
			if texts == 0 && c.name != "tool call" {
				t.Fatal("the stream has no text")
			}
		})
	}
}

// decodeAll decodes a whole stream as the relay does.
func decodeAll(t testing.TB, body []byte, evs []provider.Event) []provider.Event {
	rd := provider.SSEStream(bytes.NewReader(body), provider.NewDecoder(provider.OpenAI))
	for {
		var err error
		evs, err = rd.Next(evs)
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkOpenAIStreamDecode: reading and decoding a whole stream of the
// mock's, per stream (64 text deltas; a tool call's 64 argument
// fragments; Azure OpenAI's 64 text deltas), and one chunk of it, on a
// started stream.
func BenchmarkOpenAIStreamDecode(b *testing.B) {
	cfg := mock.Config{Tokens: 64}
	for _, c := range []struct{ name, path, body string }{
		{"text", "/v1/chat/completions", textRequest},
		{"tool", "/v1/chat/completions", toolRequest},
		{"azure", azurePath, textRequest},
	} {
		body := mockStream(b, cfg, c.path, c.body)
		b.Run("stream/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var evs []provider.Event
			for b.Loop() {
				evs = decodeAll(b, body, evs[:0])
			}
		})
	}
	body := mockStream(b, cfg, "/v1/chat/completions", textRequest)
	var chunks [][]byte
	rd := sse.NewReader(bytes.NewReader(body), provider.MaxEventBytes)
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		chunks = append(chunks, bytes.Clone(ev.Data))
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"text", chunks[2]}, // chunks[1] is "A": a one-byte string needs no allocation
		{"finish", chunks[len(chunks)-3]},
		{"usage", chunks[len(chunks)-2]},
	} {
		b.Run("chunk/"+c.name, func(b *testing.B) {
			dec := provider.NewDecoder(provider.OpenAI)
			evs, err := dec.Decode(sse.Event{Data: chunks[0]}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ev := sse.Event{Data: c.data}
			b.SetBytes(int64(len(c.data)))
			b.ReportAllocs()
			for b.Loop() {
				evs, _ = dec.Decode(ev, evs[:0])
			}
		})
	}
}
