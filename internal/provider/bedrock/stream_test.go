package bedrock

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

var update = flag.Bool("update", false, "rewrite the event-stream fixtures in testdata")

// frame is one event-stream message of a fixture.
type frame struct {
	exception string // :exception-type; empty: an event
	event     string // :event-type
	payload   string
}

func encodeFrames(t testing.TB, frames []frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, f := range frames {
		var h eventstream.Headers
		if f.exception != "" {
			h.Set(":message-type", eventstream.StringValue("exception"))
			h.Set(":exception-type", eventstream.StringValue(f.exception))
		} else {
			h.Set(":message-type", eventstream.StringValue("event"))
			h.Set(":event-type", eventstream.StringValue(f.event))
		}
		h.Set(":content-type", eventstream.StringValue("application/json"))
		if err := enc.Encode(&buf, eventstream.Message{Headers: h, Payload: []byte(f.payload)}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// The fixtures, as the ConverseStream reference shows its events (with
// the "p" padding Bedrock adds to every payload).
var fixtures = map[string][]frame{
	"converse_stream_text.bin": {
		{event: "messageStart", payload: `{"p":"abcd","role":"assistant"}`},
		{event: "contentBlockDelta", payload: `{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcdefgh"}`},
		{event: "contentBlockDelta", payload: `{"contentBlockIndex":0,"delta":{"text":", world"},"p":"ab"}`},
		{event: "contentBlockStop", payload: `{"contentBlockIndex":0,"p":"abc"}`},
		{event: "messageStop", payload: `{"p":"abcdef","stopReason":"end_turn"}`},
		{event: "metadata", payload: `{"metrics":{"latencyMs":420},"p":"abc","usage":{"cacheReadInputTokens":1200,"cacheWriteInputTokens":0,"inputTokens":10,"outputTokens":3,"totalTokens":1213}}`},
	},
	"converse_stream_tool.bin": {
		{event: "messageStart", payload: `{"p":"a","role":"assistant"}`},
		{event: "contentBlockDelta", payload: `{"contentBlockIndex":0,"delta":{"text":"Checking."},"p":"abcd"}`},
		{event: "contentBlockStop", payload: `{"contentBlockIndex":0,"p":"ab"}`},
		{event: "contentBlockStart", payload: `{"contentBlockIndex":1,"p":"abcdef","start":{"toolUse":{"name":"lookup","toolUseId":"tooluse_1"}}}`},
		{event: "contentBlockDelta", payload: `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"q\":"}},"p":"a"}`},
		{event: "contentBlockDelta", payload: `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"png\"}"}},"p":"abc"}`},
		{event: "contentBlockStop", payload: `{"contentBlockIndex":1,"p":"abcd"}`},
		{event: "messageStop", payload: `{"p":"ab","stopReason":"tool_use"}`},
		{event: "metadata", payload: `{"metrics":{"latencyMs":800},"p":"a","usage":{"inputTokens":50,"outputTokens":20,"totalTokens":70}}`},
	},
	"converse_stream_throttled.bin": {
		{event: "messageStart", payload: `{"p":"abc","role":"assistant"}`},
		{exception: "throttlingException", payload: `{"message":"Too many requests, please wait before trying again."}`},
	},
}

func TestGenerateFixtures(t *testing.T) {
	for name, frames := range fixtures {
		b := encodeFrames(t, frames)
		path := "testdata/" + name
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if have := mustRead(t, path); !bytes.Equal(have, b) {
			t.Errorf("%s is stale: go test ./internal/provider/bedrock -run TestGenerateFixtures -update", path)
		}
	}
}

// decodeAll reads a whole stream: its events, the malformed messages it
// skipped, and how it ended.
func decodeAll(r io.Reader) (evs []provider.Event, skipped int, end error) {
	s := NewStream(r, "m")
	for {
		var err error
		evs, err = s.Next(evs)
		var me *MalformedError
		switch {
		case errors.As(err, &me):
			skipped++
		case err != nil:
			return evs, skipped, err
		}
	}
}

func TestStreamText(t *testing.T) {
	evs, skipped, end := decodeAll(bytes.NewReader(mustRead(t, "testdata/converse_stream_text.bin")))
	if end != io.EOF || skipped != 0 {
		t.Fatalf("end %v, skipped %d", end, skipped)
	}
	want := []provider.Event{
		{Kind: provider.EvStart, Model: "m"},
		{Kind: provider.EvText, Text: "Hello"},
		{Kind: provider.EvText, Text: ", world"},
		{Kind: provider.EvFinish, Finish: provider.FinishStop},
		{Kind: provider.EvUsage, Usage: gw.Usage{InputTokens: 1210, OutputTokens: 3, CachedTokens: 1200}},
		{Kind: provider.EvDone},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("events\n got %+v\nwant %+v", evs, want)
	}
}

func TestStreamTool(t *testing.T) {
	evs, _, end := decodeAll(bytes.NewReader(mustRead(t, "testdata/converse_stream_tool.bin")))
	if end != io.EOF {
		t.Fatal(end)
	}
	want := []provider.Event{
		{Kind: provider.EvStart, Model: "m"},
		{Kind: provider.EvText, Text: "Checking."},
		{Kind: provider.EvToolStart, ToolIndex: 0, ToolID: "tooluse_1", ToolName: "lookup"},
		{Kind: provider.EvToolArgs, ToolIndex: 0, Args: `{"q":`},
		{Kind: provider.EvToolArgs, ToolIndex: 0, Args: `"png"}`},
		{Kind: provider.EvFinish, Finish: provider.FinishToolCalls},
		{Kind: provider.EvUsage, Usage: gw.Usage{InputTokens: 50, OutputTokens: 20}},
		{Kind: provider.EvDone},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("events\n got %+v\nwant %+v", evs, want)
	}
}

func TestStreamException(t *testing.T) {
	evs, _, _ := decodeAll(bytes.NewReader(mustRead(t, "testdata/converse_stream_throttled.bin")))
	if len(evs) != 2 || evs[1].Kind != provider.EvError {
		t.Fatalf("events %+v", evs)
	}
	e := evs[1].Err
	if e.Type != "ThrottlingException" || e.Status != 429 || e.Message != "Too many requests, please wait before trying again." {
		t.Errorf("error %+v", e)
	}
	if k, _ := ClassifyStream(e); k != gw.KindRateLimited {
		t.Errorf("kind %s", k)
	}
	for typ, want := range map[string]gw.Kind{
		"internalServerException":     gw.KindUnavailable,
		"modelStreamErrorException":   gw.KindUnavailable,
		"serviceUnavailableException": gw.KindUnavailable,
		"validationException":         gw.KindRejected,
		"throttlingException":         gw.KindRateLimited,
		"somethingNewException":       gw.KindUnavailable,
	} {
		if k, _ := ClassifyStream(ParseException(typ, []byte(`{"message":"x"}`))); k != want {
			t.Errorf("%s: %s, want %s", typ, k, want)
		}
	}
}

// TestStreamBroken: a cut inside a message breaks the stream; so does a
// message whose checksum fails, and a prelude that fails its checksum —
// never a message skipped in silence, whose text would be lost; only an
// intact message whose JSON does not parse is skipped.
func TestStreamBroken(t *testing.T) {
	whole := mustRead(t, "testdata/converse_stream_text.bin")
	_, _, end := decodeAll(bytes.NewReader(whole[:len(whole)-5]))
	if end != io.ErrUnexpectedEOF {
		t.Errorf("cut: %v", end)
	}

	one := encodeFrames(t, fixtures["converse_stream_text.bin"][1:2])
	bad := bytes.Clone(one)
	bad[len(bad)-1] ^= 0xff // the message checksum
	stream := append(append(bytes.Clone(one), bad...), encodeFrames(t, fixtures["converse_stream_text.bin"][4:])...)
	evs, skipped, end := decodeAll(bytes.NewReader(stream))
	if !errors.Is(end, ErrFraming) || skipped != 0 || len(evs) != 1 || evs[0].Text != "Hello" {
		t.Errorf("bad message checksum: end %v, skipped %d, events %+v", end, skipped, evs)
	}

	bad = bytes.Clone(one)
	bad[9] ^= 0xff // the prelude checksum
	if _, _, end := decodeAll(bytes.NewReader(bad)); !errors.Is(end, ErrFraming) {
		t.Errorf("bad prelude: %v", end)
	}

	bad = encodeFrames(t, []frame{{event: "contentBlockDelta", payload: `{"contentBlockIndex":0,"delta":{"text":`}})
	if _, skipped, end := decodeAll(bytes.NewReader(bad)); skipped != 1 || end != io.EOF {
		t.Errorf("bad JSON: skipped %d, end %v", skipped, end)
	}
	bad = encodeFrames(t, []frame{{event: "contentBlockDelta", payload: `{"contentBlockIndex":3,"delta":{"toolUse":{"input":"{}"}}}`}})
	if _, skipped, _ := decodeAll(bytes.NewReader(bad)); skipped != 1 {
		t.Errorf("tool input without a start: skipped %d", skipped)
	}
}

// TestFixturesReadBySDK: the official SDK reads the fixtures as the same
// event sequence, and the exception as its ThrottlingException.
func TestFixturesReadBySDK(t *testing.T) {
	for name, want := range map[string][]string{
		"converse_stream_text.bin": {"messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"},
		"converse_stream_tool.bin": {"messageStart", "contentBlockDelta", "contentBlockStop", "contentBlockStart", "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"},
	} {
		c, _ := sdkServer(t, 200, "application/vnd.amazon.eventstream", mustRead(t, "testdata/"+name))
		out, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String("m"),
			Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for ev := range out.GetStream().Events() {
			switch v := ev.(type) {
			case *types.ConverseStreamOutputMemberMessageStart:
				got = append(got, "messageStart")
			case *types.ConverseStreamOutputMemberContentBlockDelta:
				got = append(got, "contentBlockDelta")
			case *types.ConverseStreamOutputMemberContentBlockStart:
				if tu, ok := v.Value.Start.(*types.ContentBlockStartMemberToolUse); !ok || aws.ToString(tu.Value.Name) != "lookup" {
					t.Errorf("%s: start %+v", name, v.Value.Start)
				}
				got = append(got, "contentBlockStart")
			case *types.ConverseStreamOutputMemberContentBlockStop:
				got = append(got, "contentBlockStop")
			case *types.ConverseStreamOutputMemberMessageStop:
				got = append(got, "messageStop")
			case *types.ConverseStreamOutputMemberMetadata:
				got = append(got, "metadata")
			default:
				t.Errorf("%s: unexpected %T", name, ev)
			}
		}
		if err := out.GetStream().Err(); err != nil {
			t.Errorf("%s: SDK: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: SDK read %v, want %v", name, got, want)
		}
	}

	c, _ := sdkServer(t, 200, "application/vnd.amazon.eventstream", mustRead(t, "testdata/converse_stream_throttled.bin"))
	out, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	for range out.GetStream().Events() {
	}
	var te *types.ThrottlingException
	if err := out.GetStream().Err(); !errors.As(err, &te) {
		t.Errorf("SDK stream error %T %v, want a ThrottlingException", err, err)
	}
}

func TestResponses(t *testing.T) {
	r, err := DecodeResponse(mustRead(t, "testdata/converse_tool.json"), "m")
	if err != nil {
		t.Fatal(err)
	}
	want := &provider.Response{Model: "m", Text: "I'll look that up.", Finish: provider.FinishToolCalls,
		ToolCalls: []provider.ToolCall{{ID: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", Name: "lookup", Arguments: `{"q":"png"}`}},
		Usage:     gw.Usage{InputTokens: 412, OutputTokens: 57}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("tool answer\n got %+v\nwant %+v", r, want)
	}
	r, err = DecodeResponse(mustRead(t, "testdata/converse_text.json"), "m")
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "Hello! How can I help?" || r.Finish != provider.FinishStop ||
		r.Usage != (gw.Usage{InputTokens: 1532, OutputTokens: 8, CachedTokens: 1500, CacheWriteTokens: 20}) {
		t.Errorf("text answer %+v", r)
	}
	for _, bad := range []string{``, `{}`, `[]`, `{"output":{}}`, `{"output":{"message":{"content":"x"}}}`} {
		if _, err := DecodeResponse([]byte(bad), "m"); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
	// The SDK reads the fixtures as Converse answers with the same content.
	for _, name := range []string{"converse_tool.json", "converse_text.json"} {
		c, _ := sdkServer(t, 200, "application/json", mustRead(t, "testdata/"+name))
		out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String("m")})
		if err != nil {
			t.Fatalf("%s: SDK: %v", name, err)
		}
		if out.Usage == nil || out.StopReason == "" {
			t.Errorf("%s: SDK read %+v", name, out)
		}
	}
}

func TestFinish(t *testing.T) {
	for in, want := range map[string]string{
		"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
		"guardrail_intervened": "content_filter", "content_filtered": "content_filter",
		"model_context_window_exceeded": "length", "malformed_model_output": "stop", "": "stop",
	} {
		if got := Finish(in); got != want {
			t.Errorf("Finish(%q) = %q, want %q", in, got, want)
		}
	}
}
