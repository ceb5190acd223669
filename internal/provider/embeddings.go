package provider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oncegate/oncegate/internal/gw"
)

// Embeddings is OpenAI's POST /v1/embeddings: a client protocol served by
// OpenAI-type routes only, passed through with the route's model. An
// embedding has no side effect, so its retries, joins and replays are a
// chat completion's.
const Embeddings Protocol = "embeddings"

// parseEmbeddingsRequest reads an embeddings request. Its neutral form
// carries the model and the input as one user message (for the prompt
// estimate); one output token is reserved, as an embedding has none.
func parseEmbeddingsRequest(body []byte) (*Request, error) {
	var in struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int64          `json:"dimensions"`
		User           string          `json:"user"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("", "request body is not a valid embeddings request: %v", jsonErr(err))
	}
	switch {
	case in.Model == "":
		return nil, invalid("model", "model is required")
	case in.EncodingFormat != "" && in.EncodingFormat != "float" && in.EncodingFormat != "base64":
		return nil, invalid("encoding_format", "encoding_format must be float or base64, found %q", in.EncodingFormat)
	case in.Dimensions != nil && *in.Dimensions < 1:
		return nil, invalid("dimensions", "dimensions must be at least 1")
	}
	text, err := embeddingInput(in.Input)
	if err != nil {
		return nil, err
	}
	return &Request{Model: in.Model, User: in.User, MaxTokens: 1,
		Messages: []Message{{Role: RoleUser, Parts: []Part{{Type: PartText, Text: text}}}}}, nil
}

// embeddingInput reads input: a string, a list of strings, a list of
// token ids or a list of such lists; it returns text to estimate from.
func embeddingInput(raw json.RawMessage) (string, error) {
	if !isSet(raw) {
		return "", invalid("input", "input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", invalid("input", "input must not be empty")
		}
		return s, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return "", invalid("input", "input must be a string, an array of strings or an array of token arrays, and not empty")
	}
	var b strings.Builder
	for i, item := range list {
		var one string
		var toks []int64
		var n int64
		switch {
		case json.Unmarshal(item, &one) == nil:
			if one == "" {
				return "", invalid(fmt.Sprintf("input[%d]", i), "must not be empty")
			}
			b.WriteString(one)
		case json.Unmarshal(item, &n) == nil:
			b.WriteString("tok ") // a token id: about one token
		case json.Unmarshal(item, &toks) == nil:
			b.WriteString(strings.Repeat("tok ", len(toks)))
		default:
			return "", invalid(fmt.Sprintf("input[%d]", i), "must be a string or an array of token ids")
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// decodeEmbeddingsResponse reads an embeddings answer: its usage, once the
// list of embeddings is there.
func decodeEmbeddingsResponse(body []byte) (*Response, error) {
	var out struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
		Model  string            `json:"model"`
		Usage  *struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("malformed embeddings response: %w", err)
	}
	if out.Object != "list" || len(out.Data) == 0 {
		return nil, fmt.Errorf("an embeddings response without embeddings (object %q, %d items)", out.Object, len(out.Data))
	}
	r := &Response{Model: out.Model, Finish: FinishStop}
	if out.Usage != nil {
		r.Usage = gw.Usage{InputTokens: out.Usage.PromptTokens}
	}
	return r, nil
}
