package provider_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/mock"
	"github.com/oncegate/oncegate/internal/provider"
	"github.com/oncegate/oncegate/internal/provider/gemini"
	"github.com/oncegate/oncegate/internal/sse"
)

// The relay reads events with sse.Reader.NextView: an event's data is the
// reader's buffer, written over by the next event. So a decoder must keep
// nothing of it. Each stream here is decoded twice — as the relay does,
// and with every event's data a copy of its own — and the events must be
// the same: an event holding a slice of the reader's buffer would read
// the bytes of a later event by then.
func TestDecodersKeepNoEventData(t *testing.T) {
	t.Parallel()
	file := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	served := func(path, body string) []byte {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-test")
		req.Header.Set("x-api-key", "sk-test")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("api-key", mock.DefaultAzureAPIKey)
		req.Header.Set("x-goog-api-key", mock.DefaultGeminiAPIKey)
		rec := httptest.NewRecorder()
		mock.New(mock.Config{Tokens: 12}).ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: the mock answered %d: %s", path, rec.Code, rec.Body.Bytes())
		}
		return rec.Body.Bytes()
	}
	anthropicRequest := `{"model":"claude","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Explain receipts."}]}`
	for _, c := range []struct {
		name string
		body []byte
		dec  func() provider.Decoder
	}{
		{"openai text", served("/v1/chat/completions", textRequest), oaDecoder},
		{"openai tool call", served("/v1/chat/completions", toolRequest), oaDecoder},
		{"openai logprobs", served("/v1/chat/completions", logprobsRequest), oaDecoder},
		{"azure", served(azurePath, textRequest), oaDecoder},
		{"openai, malformed events", file("upstream_openai.sse"), oaDecoder},
		{"anthropic", served("/v1/messages", anthropicRequest), anDecoder},
		{"anthropic, malformed events", file("upstream_anthropic.sse"), anDecoder},
		{"responses", served("/v1/responses", `{"model":"gpt-4o","stream":true,"input":"Explain receipts."}`),
			func() provider.Decoder { return provider.NewDecoder(provider.Responses) }},
		{"gemini", served("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"Explain receipts."}]}]}`),
			func() provider.Decoder { return gemini.NewDecoder() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			relayed, relayedErrs := decodeViewed(c.body, c.dec())
			copied, copiedErrs := decodeCopied(t, c.body, c.dec())
			if len(copied) < 3 {
				t.Fatalf("only %d events: %+v", len(copied), copied)
			}
			if !reflect.DeepEqual(relayed, copied) || !reflect.DeepEqual(relayedErrs, copiedErrs) {
				t.Fatalf("decoded through the reader's buffer:\n%+v\n%q\nfrom copies:\n%+v\n%q", relayed, relayedErrs, copied, copiedErrs)
			}
		})
	}
}

func oaDecoder() provider.Decoder { return provider.NewDecoder(provider.OpenAI) }
func anDecoder() provider.Decoder { return provider.NewDecoder(provider.Anthropic) }

// decodeViewed decodes a stream as the relay does; a malformed event is
// skipped (its error kept) and the stream goes on.
func decodeViewed(body []byte, dec provider.Decoder) ([]provider.Event, []string) {
	st := provider.SSEStream(bytes.NewReader(body), dec)
	var evs []provider.Event
	var errs []string
	for {
		var err error
		evs, err = st.Next(evs)
		if errors.Is(err, io.EOF) {
			return evs, errs
		}
		if err != nil {
			errs = append(errs, err.Error())
			if !errors.Is(err, provider.ErrMalformedEvent) {
				return evs, errs
			}
		}
	}
}

// decodeCopied decodes the same stream with every event's data a copy.
func decodeCopied(t *testing.T, body []byte, dec provider.Decoder) ([]provider.Event, []string) {
	rd := sse.NewReader(bytes.NewReader(body), provider.MaxEventBytes)
	var evs []provider.Event
	var errs []string
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return evs, errs
		}
		if err != nil {
			t.Fatal(err)
		}
		n := len(evs)
		evs, err = dec.Decode(ev, evs)
		if err != nil {
			evs = evs[:n]
			errs = append(errs, (provider.ErrMalformedEvent).Error()+": "+err.Error())
		}
	}
}
