package mock_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/mock"
)

// required fails the test unless v, a value an official SDK (openai-go,
// anthropic-sdk-go) decoded, had every field the SDK marks required (null
// allowed), each of the type the SDK expects: the SDKs decode leniently,
// so this is what holds a fake to the API's shapes.
func required(t *testing.T, what string, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		t.Fatalf("%s: %T is not a decoded SDK type", what, v)
	}
	meta := rv.FieldByName("JSON")
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		mf := meta.FieldByName(f.Name)
		if !strings.Contains(f.Tag.Get("api"), "required") || !mf.IsValid() {
			continue
		}
		m, ok := mf.Interface().(interface {
			Raw() string
			Valid() bool
		})
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch raw := m.Raw(); {
		case raw == "":
			t.Errorf("%s: required field %q missing", what, name)
		case raw != "null" && !m.Valid():
			t.Errorf("%s: field %q = %s is not what the SDK expects", what, name, raw)
		}
	}
}

// checkResponse holds a response object and its output to the SDK's
// shapes.
func checkResponse(t *testing.T, what string, r *responses.Response) {
	t.Helper()
	required(t, what, r)
	required(t, what+" usage", r.Usage)
	required(t, what+" usage.input_tokens_details", r.Usage.InputTokensDetails)
	required(t, what+" usage.output_tokens_details", r.Usage.OutputTokensDetails)
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			msg := it.AsMessage()
			required(t, what+" message", msg)
			for _, c := range msg.Content {
				required(t, what+" output_text", c.AsOutputText())
			}
		case "function_call":
			required(t, what+" function_call", it.AsFunctionCall())
		default:
			t.Errorf("%s: output item %q", what, it.Type)
		}
	}
}

// rsStreamed reads a Responses stream through the SDK: the event types in
// order (each event held to the SDK's shapes and numbered in sequence),
// the text deltas and the final response.
func rsStreamed(t *testing.T, s interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}) (types []string, text string, final responses.Response) {
	t.Helper()
	var b strings.Builder
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber != int64(len(types)) {
			t.Fatalf("event %d (%s) numbered %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		required(t, ev.Type, ev.AsAny())
		switch ev.Type {
		case "response.output_text.delta":
			b.WriteString(ev.Delta)
		case "response.created", "response.completed", "response.incomplete", "response.failed":
			final = ev.Response
			required(t, ev.Type+" response", &final)
		case "response.output_item.added", "response.output_item.done":
			if ev.Item.ID == "" {
				t.Fatalf("%s: an item without its id", ev.Type)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return types, b.String(), final
}

func textEvents(n int, terminal string) string {
	ev := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range n {
		ev = append(ev, "response.output_text.delta")
	}
	ev = append(ev, "response.output_text.done", "response.content_part.done", "response.output_item.done")
	if terminal != "" {
		ev = append(ev, terminal)
	}
	return strings.Join(ev, " ")
}

var rsSearchTool = responses.ToolParamOfFunction("search", map[string]any{"type": "object",
	"properties": map[string]any{"query": map[string]any{"type": "string"}}}, false)

func rsParams(input string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)}}
}

// TestResponsesSDKAgainstTheMock checks the Responses fake with
// openai-go's responses package: create, stream, retrieve, a chain by
// previous_response_id, input items, delete, tools, the output limit, and
// a prompt counted and answered as the Chat Completions fake does.
func TestResponsesSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 30, CachedTokens: 4, CacheWriteTokens: 2})
	c := oaClient(url)
	ctx := context.Background()
	want := mock.AnswerFor(0, question, 30)
	res, err := c.Responses.New(ctx, rsParams(question))
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "create", res)
	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: userMsg(question)})
	if err != nil {
		t.Fatal(err)
	}
	u := res.Usage
	if res.OutputText() != want || res.Status != "completed" || res.CompletedAt == 0 || u.OutputTokens != 30 || u.InputTokens != chat.Usage.PromptTokens ||
		u.InputTokensDetails.CachedTokens != 4 || u.InputTokensDetails.CacheWriteTokens != 2 || u.TotalTokens != u.InputTokens+30 {
		t.Fatalf("json answer %q status %q usage %+v (chat's prompt: %d)", res.OutputText(), res.Status, u, chat.Usage.PromptTokens)
	}

	types, text, final := rsStreamed(t, c.Responses.NewStreaming(ctx, rsParams(question)))
	if got := strings.Join(types, " "); got != textEvents(30, "response.completed") {
		t.Fatalf("events %s", got)
	}
	if text != want || final.OutputText() != want || final.Status != "completed" || final.Usage.OutputTokens != 30 {
		t.Fatalf("stream %q, final %q %q %+v", text, final.OutputText(), final.Status, final.Usage)
	}
	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil || got.RawJSON() != final.RawJSON() {
		t.Fatalf("retrieved %v: %s\nthe stream ended with %s", err, got.RawJSON(), final.RawJSON())
	}
	checkResponse(t, "retrieve", got)

	// A chain: the turn follows the stored response.
	p := rsParams("and then?")
	p.PreviousResponseID = openai.String(res.ID)
	next, err := c.Responses.New(ctx, p)
	if err != nil || next.OutputText() != mock.AnswerTo(0, "", []string{question, want, "and then?"}, 30) || next.PreviousResponseID != res.ID {
		t.Fatalf("chained %+v %v", next, err)
	}
	items, err := c.Responses.InputItems.List(ctx, next.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 {
		t.Fatalf("input items %+v %v", items, err)
	}
	in := items.Data[0].AsMessage()
	required(t, "input item", in)
	if in.ID == "" || in.Role != "user" || len(in.Content) != 1 || in.Content[0].Text != "and then?" {
		t.Fatalf("input item %s", items.Data[0].RawJSON())
	}

	// Deleted: gone, and no turn follows it; a turn after a later one
	// still reads the whole chain.
	if err := c.Responses.Delete(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	var oe *openai.Error
	if _, err := c.Responses.Get(ctx, res.ID, responses.ResponseGetParams{}); !errors.As(err, &oe) || oe.StatusCode != 404 {
		t.Fatalf("deleted, retrieved: %v", err)
	}
	if _, err := c.Responses.New(ctx, p); !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Code != "previous_response_not_found" || oe.Param != "previous_response_id" {
		t.Fatalf("deleted, continued: %v", err)
	}
	p = rsParams("more")
	p.PreviousResponseID = openai.String(next.ID)
	if third, err := c.Responses.New(ctx, p); err != nil ||
		third.OutputText() != mock.AnswerTo(0, "", []string{question, want, "and then?", next.OutputText(), "more"}, 30) {
		t.Fatalf("after a deleted ancestor: %v", err)
	}

	// A tool offered: the mock calls it, whole and streamed.
	p = rsParams(question)
	p.Tools = []responses.ToolUnionParam{rsSearchTool}
	res, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "tool call", res)
	if fc := res.Output[0].AsFunctionCall(); len(res.Output) != 1 || fc.Name != "search" || fc.Arguments != `{"query": "oncegate receipts"}` || !strings.HasPrefix(fc.CallID, "call_") {
		t.Fatalf("tool call %s", res.RawJSON())
	}
	types, _, final = rsStreamed(t, c.Responses.NewStreaming(ctx, p))
	if got := strings.Join(types, " "); got != "response.created response.in_progress response.output_item.added "+
		strings.Repeat("response.function_call_arguments.delta ", 3)+"response.function_call_arguments.done response.output_item.done response.completed" {
		t.Fatalf("tool events %s", got)
	}
	if fc := final.Output[0].AsFunctionCall(); fc.Arguments != `{"query": "oncegate receipts"}` {
		t.Fatalf("streamed tool call %s", final.RawJSON())
	}

	// The output limit: incomplete.
	p = rsParams(question)
	p.MaxOutputTokens = openai.Int(5)
	if res, err = c.Responses.New(ctx, p); err != nil || res.Status != "incomplete" || res.IncompleteDetails.Reason != "max_output_tokens" ||
		res.OutputText() != mock.AnswerFor(0, question, 5) || res.Usage.OutputTokens != 5 {
		t.Fatalf("limited %+v %v", res, err)
	}
	types, _, final = rsStreamed(t, c.Responses.NewStreaming(ctx, p))
	if got := strings.Join(types, " "); got != textEvents(5, "response.incomplete") || final.Status != "incomplete" {
		t.Fatalf("limited stream %s", got)
	}
	if s := m.Stats(); s.Requests != 9 || m.StoredResponses() != 7 || m.Lookups() != 4 {
		t.Fatalf("stats %+v, %d stored, %d lookups", s.Counter, m.StoredResponses(), m.Lookups())
	}
}

func userMsg(text string) []openai.ChatCompletionMessageParamUnion {
	return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}
}

// A conversation with a tool's round trip reads as the same turns in the
// Responses API as in Chat Completions: the same answer, the same prompt
// count.
func TestResponsesReadToolTurnsAsChatDoes(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 12})
	c := oaClient(url)
	ctx := context.Background()
	args := `{"query":"receipts"}`
	p := rsParams("")
	p.Instructions = openai.String("Be brief.")
	p.Tools = []responses.ToolUnionParam{rsSearchTool}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: []responses.ResponseInputItemUnionParam{
		responses.ResponseInputItemParamOfMessage(question, responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(args, "call_1", "search"),
		responses.ResponseInputItemParamOfFunctionCallOutput("42 receipts"),
	}}
	p.Input.OfInputItemList[2].OfFunctionCallOutput.CallID = openai.String("call_1")
	res, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "search",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}})},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage(question),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "search", Arguments: args}}}}}},
			openai.ToolMessage("42 receipts", "call_1")}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputText() == "" || res.OutputText() != chat.Choices[0].Message.Content || res.Usage.InputTokens != chat.Usage.PromptTokens {
		t.Fatalf("responses %q (%d prompt tokens), chat %q (%d)", res.OutputText(), res.Usage.InputTokens,
			chat.Choices[0].Message.Content, chat.Usage.PromptTokens)
	}
}
