package mock_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestConversationsSDKAgainstTheMock checks the conversation objects with
// openai-go's conversations package: created with items, a response
// appending its turn, the items listed in either order and by page, one
// deleted, and what Mock.Conversation reports.
func TestConversationsSDKAgainstTheMock(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 10})
	c := oaClient(url)
	ctx := context.Background()
	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{Items: []responses.ResponseInputItemUnionParam{
		responses.ResponseInputItemParamOfMessage("You are terse.", responses.EasyInputMessageRoleDeveloper)}})
	if err != nil {
		t.Fatal(err)
	}
	required(t, "conversation", conv)
	p := rsParams(question)
	p.Conversation = responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}
	res, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerTo(0, "You are terse.", []string{question}, 10)
	if res.OutputText() != want || res.Conversation.ID != conv.ID {
		t.Fatalf("answer %q in %q, want %q", res.OutputText(), res.Conversation.ID, want)
	}
	page, err := c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	if err != nil || len(page.Data) != 3 || page.HasMore {
		t.Fatalf("items %+v %v", page, err)
	}
	var ids, says []string
	for _, it := range page.Data {
		msg := it.AsMessage()
		required(t, "conversation item", msg)
		ids = append(ids, msg.ID)
		says = append(says, string(msg.Role)+":"+msg.Content[0].Text)
	}
	if got := strings.Join(says, "|"); got != "developer:You are terse.|user:"+question+"|assistant:"+want {
		t.Fatalf("items say %s", got)
	}
	held := m.Conversation(conv.ID)
	for i, it := range held {
		if it.ID != ids[i] || it.Role+":"+it.Text() != says[i] {
			t.Fatalf("Mock.Conversation item %d: %+v, listed %s %s", i, it, ids[i], says[i])
		}
	}
	if res.Output[0].ID != ids[2] {
		t.Fatalf("the output item %s is listed as %s", res.Output[0].ID, ids[2])
	}

	// Newest first by default; a page of one after an item.
	page, err = c.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Limit: openai.Int(1), After: openai.String(ids[2])})
	if err != nil || len(page.Data) != 1 || page.Data[0].AsMessage().ID != ids[1] || !page.HasMore || page.LastID != ids[1] {
		t.Fatalf("a page: %s %v", page.RawJSON(), err)
	}

	// Deleted: the conversation is answered, the item gone.
	after, err := c.Conversations.Items.Delete(ctx, conv.ID, ids[1])
	if err != nil || after.ID != conv.ID || len(m.Conversation(conv.ID)) != 2 {
		t.Fatalf("delete: %+v %v, %d items left", after, err, len(m.Conversation(conv.ID)))
	}
	var oe *openai.Error
	if _, err := c.Conversations.Items.Delete(ctx, conv.ID, ids[1]); !errors.As(err, &oe) || oe.StatusCode != 404 {
		t.Fatalf("deleted twice: %v", err)
	}
	p.Conversation = responses.ResponseNewParamsConversationUnion{OfString: openai.String("conv_missing")}
	if _, err := c.Responses.New(ctx, p); !errors.As(err, &oe) || oe.StatusCode != 404 {
		t.Fatalf("a missing conversation: %v", err)
	}
	if n := m.Lookups(); n != 5 {
		t.Fatalf("%d lookups: the creation, two listings and two deletions", n)
	}
}

// The faults that commit a Responses turn and lose its reply, and those
// mid-stream, through the SDK: the turn is stored (twice for
// commit_twice_then_502) while the client reads an error.
func TestResponsesFaultsThroughTheSDK(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 6})
	c := oaClient(url)
	ctx := context.Background()
	conv, err := c.Conversations.New(ctx, conversations.ConversationNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	p := rsParams(question)
	p.Conversation = responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)}
	var oe *openai.Error
	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultCommitTwiceThen502}}}})
	if _, err := c.Responses.New(ctx, p); !errors.As(err, &oe) || oe.StatusCode != 502 {
		t.Fatalf("commit twice then 502: %v", err)
	}
	if n, items := m.StoredResponses(), m.Conversation(conv.ID); n != 2 || len(items) != 4 || items[1].Text() != items[3].Text() || items[1].ID == items[3].ID {
		t.Fatalf("%d stored, conversation %+v", n, items)
	}
	if s := m.Stats(); s.OutputTokens != 12 {
		t.Fatalf("two generations billed: %d output tokens", s.OutputTokens)
	}

	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStatus, Status: 429, RetryAfter: "2"}}}})
	if _, err := c.Responses.New(ctx, p); !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Code != "rate_limit_exceeded" || oe.Response.Header.Get("Retry-After") != "2" {
		t.Fatalf("429: %v", err)
	}

	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultStreamError, After: 2}}}})
	types, text, final := rsStreamed(t, c.Responses.NewStreaming(ctx, rsParams(question)))
	if got := strings.Join(types[len(types)-2:], " "); got != "error response.failed" || text != mock.AnswerTo(0, "", []string{question}, 6)[:len(text)] ||
		final.Status != "failed" || final.Error.Code != "server_error" {
		t.Fatalf("stream error: %v %q %s", types, text, final.RawJSON())
	}

	m.SetScript(mock.Script{Rules: []mock.Rule{{Fault: mock.Fault{Type: mock.FaultNoDone}}}})
	stored := m.StoredResponses()
	types, _, _ = rsStreamed(t, c.Responses.NewStreaming(ctx, rsParams(question)))
	if last := types[len(types)-1]; last != "response.output_item.done" || m.StoredResponses() != stored+1 {
		t.Fatalf("no_done ends with %s; %d stored", last, m.StoredResponses())
	}
}

// TestEmbeddingsSDKAgainstTheMock checks the embeddings fake with
// openai-go: a list of inputs, dimensions, float and base64 encodings,
// and the usage counted by the prompt rule.
func TestEmbeddingsSDKAgainstTheMock(t *testing.T) {
	_, url := start(t, mock.Config{})
	c := oaClient(url)
	ctx := context.Background()
	inputs := []string{"hello", "a longer text to embed"}
	for _, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
		res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed", Dimensions: openai.Int(16), EncodingFormat: format,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs}})
		if err != nil {
			t.Fatal(err)
		}
		required(t, "embeddings", res)
		required(t, "embeddings usage", res.Usage)
		if len(res.Data) != 2 || res.Model != "embed" || res.Usage.PromptTokens != 2+6 || res.Usage.TotalTokens != 8 {
			t.Fatalf("%s: %s", format, res.RawJSON())
		}
		for i, d := range res.Data {
			required(t, "embedding", d)
			want := mock.Embedding(inputs[i], 16)
			if d.Index != int64(i) || len(d.Embedding) != 16 {
				t.Fatalf("%s: embedding %d: %+v", format, i, d)
			}
			for j, v := range d.Embedding {
				if w := want[j]; v != w && v != float64(float32(w)) || math.IsNaN(v) {
					t.Fatalf("%s: embedding %d[%d] = %v, want %v", format, i, j, v, w)
				}
			}
		}
	}
}

// A Responses request the fake cannot read is a 400 in OpenAI's shape,
// naming the parameter at fault, and never reaches the script or the
// counters.
func TestResponsesRefusals(t *testing.T) {
	m, url := start(t, mock.Config{})
	for _, tc := range []struct{ body, param string }{
		{`{"input":"hi"}`, "model"},
		{`{"model":"m"}`, "input"},
		{`{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"m","input":"hi","conversation":"conv_1","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"model":"m","input":"hi","tool_choice":"sometimes"}`, "tool_choice"},
		{`{"model":"m","input":[{"role":"robot","content":"hi"}]}`, "input[0].role"},
		{`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_video"}]}]}`, "input[0].content[0].type"},
		{`{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "input[0].type"},
		{`{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
		{`{"model":"m","input":[{"type":"function_call","call_id":"c1","arguments":"{}"}]}`, "input[0].name"},
		{`{"model":"m","input":"hi","metadata":["x"]}`, "metadata"},
	} {
		res, err := http.Post(url+"/v1/responses", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Type, Message string
				Param         *string
			}
		}
		_ = json.NewDecoder(res.Body).Decode(&e)
		_ = res.Body.Close()
		if res.StatusCode != 400 || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Message == "" {
			t.Errorf("%s: %d %+v, want a 400 naming %s", tc.body, res.StatusCode, e.Error, tc.param)
		}
	}
	if n := m.Requests(); n != 0 {
		t.Fatalf("%d refused requests counted", n)
	}
}
