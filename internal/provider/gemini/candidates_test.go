package gemini

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// OpenAI's n becomes candidateCount; one choice sends none.
func TestBuildCandidateCount(t *testing.T) {
	for _, c := range []struct {
		n    string
		want any
	}{{"2", float64(2)}, {"8", float64(8)}, {"1", nil}, {"", nil}} {
		body := `{"model":"m","messages":[{"role":"user","content":"x"}]`
		if c.n != "" {
			body += `,"n":` + c.n
		}
		b, err := BuildRequest(parse(t, provider.OpenAI, body+"}"), provider.Target{Model: "g"}, nil)
		if err != nil {
			t.Fatalf("n=%s: %v", c.n, err)
		}
		gc, _ := decode(t, b)["generationConfig"].(map[string]any)
		if got := gc["candidateCount"]; got != c.want {
			t.Errorf("n=%s: candidateCount %v, want %v", c.n, got, c.want)
		}
	}
	if got := NativeOnly(provider.OpenAI, []byte(`{"model":"m","messages":[],"n":2}`)); len(got) != 0 {
		t.Errorf("n=2 keeps a Gemini route off: %v", got)
	}
}

// Each candidate of an answer is the choice of its index, whatever their
// order in the body (index 0 may go unnamed); function call ids are
// unique across candidates; usage counts them all.
func TestDecodeCandidates(t *testing.T) {
	b, _ := os.ReadFile("testdata/candidates.json")
	r, err := DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "Octopuses have three hearts." || r.Finish != provider.FinishStop || len(r.Others) != 2 {
		t.Fatalf("choice 0 %q %q, %d others", r.Text, r.Finish, len(r.Others))
	}
	if o := r.Others[0]; o.Text != "Otters hold hands while they sleep." || o.Finish != provider.FinishStop {
		t.Errorf("choice 1 = %+v", o)
	}
	if o := r.Others[1]; len(o.ToolCalls) != 1 || o.ToolCalls[0].Name != "lookup" || o.ToolCalls[0].ID != "call_c4nd1d4t3s_0" || o.Finish != provider.FinishToolCalls {
		t.Errorf("choice 2 = %+v", o)
	}
	if r.Usage != (gw.Usage{InputTokens: 7, OutputTokens: 21}) {
		t.Errorf("usage %+v", r.Usage)
	}

	for _, bad := range []string{
		`{"candidates":[{"index":0},{"index":0}]}`,
		`{"candidates":[{"index":0},{"index":2}]}`,
		`{"candidates":[{"index":-1}]}`,
		`{"candidates":[{},{},{},{},{},{},{},{},{}]}`,
	} {
		if _, err := DecodeResponse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "candidate") {
			t.Errorf("%s: decoded (%v)", bad, err)
		}
	}
	// One candidate without a usable call: the answer asked for is not
	// all there.
	_, err = DecodeResponse([]byte(`{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"},{"index":1,"finishReason":"MALFORMED_FUNCTION_CALL"}]}`))
	var fg *FailedGeneration
	if !errors.As(err, &fg) || fg.Reason != "MALFORMED_FUNCTION_CALL" {
		t.Errorf("a failed second candidate: %v", err)
	}
	// A candidate withheld for safety is a refusal of its own.
	r, err = DecodeResponse([]byte(`{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"},{"index":1,"finishReason":"SAFETY"}]}`))
	if err != nil || r.Text != "ok" || len(r.Others) != 1 || r.Others[0].Finish != provider.FinishContentFilter || !strings.Contains(r.Others[0].Refusal, "SAFETY") {
		t.Errorf("a withheld second candidate: %+v %v", r, err)
	}
}

// A stream's chunks hold some candidates each: every event names its
// candidate's index, each candidate finishes once, on its own, after the
// chunk's usage.
func TestStreamCandidates(t *testing.T) {
	b, _ := os.ReadFile("testdata/candidates_stream.sse")
	evs, warnings := events(t, b)
	if warnings != 0 {
		t.Fatalf("%d warnings", warnings)
	}
	text := map[int]string{}
	finish := map[int]string{}
	var usage gw.Usage
	for i, e := range evs {
		switch e.Kind {
		case provider.EvText:
			text[e.Choice] += e.Text
		case provider.EvFinish:
			if _, twice := finish[e.Choice]; twice || evs[i-1].Kind != provider.EvUsage && evs[i-1].Kind != provider.EvFinish {
				t.Errorf("finish %+v twice, or before the chunk's usage", e)
			}
			finish[e.Choice] = e.Finish
		case provider.EvUsage:
			usage = e.Usage
		}
	}
	if text[0] != "Octopuses have three hearts." || text[1] != "Otters hold hands." || finish[0] != provider.FinishLength || finish[1] != provider.FinishStop || len(finish) != 2 {
		t.Errorf("text %v finish %v", text, finish)
	}
	if usage != (gw.Usage{InputTokens: 7, OutputTokens: 11}) {
		t.Errorf("usage %+v", usage)
	}

	// Function calls: each candidate's tool indexes start at 0, ids stay
	// unique across candidates.
	evs, _ = events(t, []byte(`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"f"}}]},"finishReason":"STOP"},{"index":1,"content":{"parts":[{"functionCall":{"name":"g"}}]},"finishReason":"STOP"}],"responseId":"r1"}`+"\n\n"))
	var starts []provider.Event
	for _, e := range evs {
		if e.Kind == provider.EvToolStart {
			starts = append(starts, e)
		}
	}
	if len(starts) != 2 || starts[0].Choice != 0 || starts[1].Choice != 1 || starts[1].ToolIndex != 0 || starts[0].ToolID == starts[1].ToolID {
		t.Errorf("tool starts %+v", starts)
	}
	if last := evs[len(evs)-1]; last.Kind != provider.EvFinish || last.Finish != provider.FinishToolCalls || last.Choice != 1 {
		t.Errorf("last %+v", last)
	}

	// A blocked prompt ends every choice at once.
	evs, _ = events(t, []byte("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":3}}\n\n"))
	if last := evs[len(evs)-1]; last.Kind != provider.EvFinish || !last.AllChoices || last.Finish != provider.FinishContentFilter {
		t.Errorf("blocked prompt: %+v", evs)
	}

	// A candidate past the most a request may ask for is a malformed
	// chunk, skipped whole.
	evs, warnings = events(t, []byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}},{\"index\":8,\"content\":{\"parts\":[{\"text\":\"b\"}]}}]}\n\n"))
	if warnings != 1 || len(evs) != 0 {
		t.Errorf("index 8: %d warnings, events %+v", warnings, evs)
	}
}
