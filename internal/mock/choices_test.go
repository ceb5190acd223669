package mock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
	"google.golang.org/genai"

	"github.com/oncegate/oncegate/internal/mock"
)

// TestChatCompletionsAnswersNChoices holds the Chat Completions fake to
// OpenAI's n as openai-go reads it: n choices of index 0…n-1, each a text
// of its own (the first the one n=1 gives), the usage counting every
// choice's output; streamed, each chunk's choice carries its index, every
// choice has its role and its finish reason, and the accumulator the SDK
// offers rebuilds the same n answers. n out of 1…128 is a 400 naming n.
func TestChatCompletionsAnswersNChoices(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 6})
	c := oaClient(url)
	ctx := context.Background()
	one, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: userMsg(question)})
	if err != nil {
		t.Fatal(err)
	}
	params := openai.ChatCompletionNewParams{Model: "m", Messages: userMsg(question), N: openai.Int(3)}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 3 || res.Usage.CompletionTokens != 18 || res.Choices[0].Message.Content != one.Choices[0].Message.Content {
		t.Fatalf("n=3: %d choices, %d completion tokens, first %q (n=1: %q)", len(res.Choices), res.Usage.CompletionTokens,
			res.Choices[0].Message.Content, one.Choices[0].Message.Content)
	}
	seen := map[string]bool{}
	for i, ch := range res.Choices {
		if ch.Index != int64(i) || ch.FinishReason != "stop" || ch.Message.Content == "" || seen[ch.Message.Content] {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		seen[ch.Message.Content] = true
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	roles, finishes, texts := map[int64]int{}, map[int64]int{}, map[int64]int{}
	for s.Next() {
		ch := s.Current()
		acc.AddChunk(ch)
		if len(ch.Choices) > 1 {
			t.Fatalf("a chunk with %d choices", len(ch.Choices))
		}
		for _, choice := range ch.Choices {
			switch {
			case choice.Delta.Role == "assistant":
				roles[choice.Index]++
			case choice.FinishReason != "":
				finishes[choice.Index]++
			case choice.Delta.Content != "":
				texts[choice.Index]++
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range int64(3) {
		if roles[i] != 1 || finishes[i] != 1 || texts[i] != 6 {
			t.Fatalf("choice %d: %d role, %d finish, %d text chunks", i, roles[i], finishes[i], texts[i])
		}
	}
	if len(acc.Choices) != 3 || acc.Usage.CompletionTokens != 18 {
		t.Fatalf("accumulated: %d choices, usage %+v", len(acc.Choices), acc.Usage)
	}
	for i, ch := range acc.Choices {
		if ch.Message.Content != res.Choices[i].Message.Content {
			t.Fatalf("streamed choice %d %q, not %q", i, ch.Message.Content, res.Choices[i].Message.Content)
		}
	}
	if st := m.Stats(); st.Requests != 3 || st.OutputTokens != 6+18+18 {
		t.Fatalf("stats: %d requests, %d output tokens", st.Requests, st.OutputTokens)
	}

	for _, n := range []int64{0, 129} {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: userMsg(question), N: openai.Int(n)})
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "n" {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

// TestGeminiAnswersCandidateCount holds the Gemini fake to
// generationConfig.candidateCount as genai reads it: that many
// candidates of index 0…n-1, the first the answer of one, the usage's
// candidatesTokenCount counting all; streamed, each chunk's candidate
// names its index and the last chunk ends every candidate. Beyond 8 is a
// 400 INVALID_ARGUMENT.
func TestGeminiAnswersCandidateCount(t *testing.T) {
	m, url := start(t, mock.Config{Tokens: 5})
	c := geminiClient(t, url, mock.DefaultGeminiAPIKey)
	ctx := context.Background()
	cfg := &genai.GenerateContentConfig{CandidateCount: 2}
	res, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text(question), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := mock.AnswerFor(0, question, 5)
	if len(res.Candidates) != 2 || res.Candidates[0].Index != 0 || res.Candidates[1].Index != 1 || res.UsageMetadata.CandidatesTokenCount != 10 ||
		res.Candidates[0].Content.Parts[0].Text != want || res.Candidates[1].Content.Parts[0].Text == want || res.Candidates[1].FinishReason != genai.FinishReasonStop {
		t.Fatalf("candidateCount 2: %d candidates, usage %+v", len(res.Candidates), res.UsageMetadata)
	}
	texts := map[int32]string{}
	var last *genai.GenerateContentResponse
	for r, err := range c.Models.GenerateContentStream(ctx, "gemini-2.5-flash", genai.Text(question), cfg) {
		if err != nil {
			t.Fatal(err)
		}
		for _, cand := range r.Candidates {
			for _, p := range cand.Content.Parts {
				texts[cand.Index] += p.Text
			}
		}
		last = r
	}
	if texts[0] != want || texts[1] != res.Candidates[1].Content.Parts[0].Text || len(last.Candidates) != 2 ||
		last.Candidates[1].FinishReason != genai.FinishReasonStop || last.UsageMetadata.CandidatesTokenCount != 10 {
		t.Fatalf("streamed %q, last %+v", texts, last)
	}
	if st := m.Stats(); st.OutputTokens != 20 {
		t.Fatalf("stats: %d output tokens", st.OutputTokens)
	}
	_, err = c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text(question), &genai.GenerateContentConfig{CandidateCount: 9})
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != 400 || ae.Status != "INVALID_ARGUMENT" {
		t.Fatalf("candidateCount 9: %v", err)
	}
}
