package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/gw"
	"github.com/oncegate/oncegate/internal/provider"
)

// converseResponse is the part of a Converse answer oncegate reads.
type converseResponse struct {
	Output *struct {
		Message *struct {
			Role    string          `json:"role"`
			Content []responseBlock `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string      `json:"stopReason"`
	Usage      *tokenUsage `json:"usage"`
}

type responseBlock struct {
	Text    *string `json:"text"`
	ToolUse *struct {
		ToolUseID string          `json:"toolUseId"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"toolUse"`
	ReasoningContent json.RawMessage `json:"reasoningContent"`
}

// tokenUsage is Converse's usage. inputTokens excludes the tokens read
// from and written to the prompt cache, which it reports beside it.
type tokenUsage struct {
	InputTokens           int64 `json:"inputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	TotalTokens           int64 `json:"totalTokens"`
	CacheReadInputTokens  int64 `json:"cacheReadInputTokens"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
}

// usage converts to the neutral usage, whose input counts every prompt
// token, cache reads and writes included.
func (u *tokenUsage) usage() gw.Usage {
	if u == nil {
		return gw.Usage{}
	}
	clamp := func(n int64) int64 { return max(n, 0) }
	return gw.Usage{
		InputTokens:      clamp(u.InputTokens) + clamp(u.CacheReadInputTokens) + clamp(u.CacheWriteInputTokens),
		OutputTokens:     clamp(u.OutputTokens),
		CachedTokens:     clamp(u.CacheReadInputTokens),
		CacheWriteTokens: clamp(u.CacheWriteInputTokens),
	}
}

// Finish maps a Converse stopReason to the neutral finish reason.
// A guardrail's intervention and a content filter are content_filter;
// running out of tokens or of context window is length; a stop sequence
// is stop, as in OpenAI's vocabulary. An unknown reason is stop: the
// answer did end.
func Finish(stopReason string) string {
	switch stopReason {
	case "tool_use":
		return provider.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return provider.FinishLength
	case "guardrail_intervened", "content_filtered":
		return provider.FinishContentFilter
	}
	return provider.FinishStop
}

// errNoOutput is an answer without output.message: not a Converse answer.
var errNoOutput = errors.New("bedrock: Converse answer has no output.message")

// DecodeResponse reads a Converse success body from the route's model
// (Converse does not name it; the answer does). A body that is not a
// Converse answer is an error (a protocol violation). Reasoning blocks are
// generated, and billed, but not carried: the neutral answer has no
// thinking.
func DecodeResponse(body []byte, model string) (*provider.Response, error) {
	var in converseResponse
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("bedrock: decode Converse answer: %w", err)
	}
	if in.Output == nil || in.Output.Message == nil {
		return nil, errNoOutput
	}
	r := &provider.Response{Model: model, Finish: Finish(in.StopReason), Usage: in.Usage.usage()}
	for _, b := range in.Output.Message.Content {
		switch {
		case b.Text != nil:
			r.Text += *b.Text
		case b.ToolUse != nil:
			args := "{}"
			if len(b.ToolUse.Input) > 0 && string(b.ToolUse.Input) != "null" {
				args = string(b.ToolUse.Input)
			}
			r.ToolCalls = append(r.ToolCalls, provider.ToolCall{ID: b.ToolUse.ToolUseID, Name: b.ToolUse.Name, Arguments: args})
		}
	}
	if in.StopReason == "" {
		r.Finish = provider.FinishStop
		if len(r.ToolCalls) > 0 {
			r.Finish = provider.FinishToolCalls
		}
	}
	return r, nil
}
