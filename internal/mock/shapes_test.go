package mock_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestChatCompletionsHasEveryRequiredField holds the Chat Completions
// fake's answers and chunks to every field openai-go marks required.
func TestChatCompletionsHasEveryRequiredField(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 3})
	c := oaClient(url)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "m", Messages: userMsg(question)}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	required(t, "chat.completion", res)
	required(t, "choice", res.Choices[0])
	required(t, "message", res.Choices[0].Message)
	required(t, "usage", res.Usage)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	chunks := 0
	for s.Next() {
		ch := s.Current()
		chunks++
		required(t, "chat.completion.chunk", ch)
		for _, choice := range ch.Choices {
			required(t, "chunk choice", choice)
		}
	}
	if err := s.Err(); err != nil || chunks != 6 {
		t.Fatalf("%d chunks: %v", chunks, err)
	}
}

// TestMessagesStreamEventsHaveEveryRequiredField holds the Anthropic
// fake's stream events and their deltas to every field anthropic-sdk-go
// marks required. (The message object and its usage are not held to it:
// the SDK marks as required fields the fake leaves out — docs/mock.md.)
func TestMessagesStreamEventsHaveEveryRequiredField(t *testing.T) {
	_, url := start(t, mock.Config{Tokens: 3})
	c := anClient(url)
	s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(question))}})
	var types []string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		required(t, ev.Type, ev.AsAny())
		if ev.Type == "content_block_delta" {
			required(t, "delta", ev.AsContentBlockDelta().Delta.AsAny())
		}
	}
	if err := s.Err(); err != nil || len(types) != 8 { // the SDK drops ping
		t.Fatalf("events %v: %v", types, err)
	}
}
